"""What an input may be: a job id, a text field, a message's size. One rule each, pure.

Every way a value enters reliable passes one of these checks before it reaches the database:
- a job id (`job_id_problem`): a string of 1 to `MAX_JOB_ID` characters without control
  characters (Unicode category Cc: NUL, the C0 and C1 controls, DEL) and without lone surrogates
  (no UTF-8 for them). Everything else is allowed, `/ ? # %` and spaces included: every API route and
  console link takes such ids, percent-encoded. Dramatiq's own ids are UUIDs (36 characters); a
  business id such as ``"invoice-" + sha256`` (72) fits. Checked at registration
  (`StateStore.register*`: ``send()`` raises `MessageRefused`) and for every delivery (a foreign
  message that breaks it is dead-lettered: reliable.worker.delivery);
- a text field of the API or the console (`text_problem`): no control characters but tab, newline
  and carriage return (PostgreSQL's text cannot hold NUL), no lone surrogates; a 400 names the field;
- a message (`message_size_problem`): at most `MAX_MESSAGE_BYTES` bytes of JSON as stored with
  its job (arguments, keyword arguments and options together);
- a text a person typed (`check_length`): a reason or a label at most `MAX_TEXT` characters, a name
  (an operator's, a token's: stored in 255-character columns) at most `MAX_NAME`. The one check of
  the API, the console and the CLI (`commands.require_reason` makes it for every command's reason,
  before anything is read or written); the console shows a shortened reason where it repeats one on
  every page (the paused queues' banner) and the whole on the queue's page.

`shorten` cuts a text for display (a page, a drawing, a table cell, an alert's context) to a width,
an ellipsis marking the cut; `clip` cuts a value for a log line or a label, saying how much it left
out; `storable` makes any text one the store can hold (every free text of a job write passes it:
reliable.store.writes).
"""

from __future__ import annotations

import re
from typing import Any

from .errors import InvalidReason, ReasonRequired, TextTooLong

__all__ = ["MAX_JOB_ID", "MAX_MESSAGE_BYTES", "MAX_NAME", "MAX_STORED_TEXT", "MAX_TEXT", "check_length",
           "check_reason", "check_reason_chars", "clip", "escape_controls", "job_id_problem", "message_size_problem",
           "shorten", "storable", "text_problem"]

#: The longest job id, in characters (the id columns are VARCHAR(255): migrations 0015 and 0016).
MAX_JOB_ID = 255
#: The largest message a job may be registered with: its JSON as stored, in bytes (1 MiB). Keep
#: big payloads elsewhere (an object store) and send their key: every copy of the message, every
#: re-dispatch and the job's row carry it whole.
MAX_MESSAGE_BYTES = 1024 * 1024
#: The longest free text the store keeps in one field, in characters (an error message, a traceback,
#: a reason: each has its own smaller bound where it is made; this one holds whatever reaches the store).
MAX_STORED_TEXT = 64 * 1024

#: The longest reason or label a person may enter, in characters: a few paragraphs and links. Longer
#: is refused: every audit record, listing and console page that shows it repeats it.
MAX_TEXT = 1000
#: The longest name a person may enter (an operator's, a token's), in characters: their columns are
#: VARCHAR(255).
MAX_NAME = 255

_ID_REFUSED = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_TEXT_REFUSED = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
#: What neither database can hold in a text column: NUL (PostgreSQL) and lone surrogates (no UTF-8
#: for them: both drivers raise UnicodeEncodeError). A surrogate pair is two lone ones in a str.
_UNSTORABLE = re.compile(r"[\x00\ud800-\udfff]")


def _char(found: re.Match[str]) -> str:
    return f"U+{ord(found.group()):04X} at position {found.start()}"


def job_id_problem(value: Any) -> str | None:
    """What makes `value` no job id (None: it is one), in words for an error message."""
    if not isinstance(value, str):
        return f"a job id must be a string, not {type(value).__name__}"
    if not value:
        return "a job id must not be empty"
    if len(value) > MAX_JOB_ID:
        return f"a job id has at most {MAX_JOB_ID} characters, this one has {len(value)}"
    found = _ID_REFUSED.search(value)
    if found is not None:
        return f"a job id may not hold control characters or lone surrogates ({_char(found)})"
    return None


def text_problem(value: str) -> str | None:
    """What makes `value` unfit for a text field (None: it is fine): a control character other than
    tab, newline and carriage return, or a lone surrogate."""
    found = _TEXT_REFUSED.search(value)
    if found is None:
        return None
    return f"control characters are not allowed ({_char(found)})"


def check_length(field: str, value: str | None, *, limit: int = MAX_TEXT, where: str | None = None) -> None:
    """Raise TextTooLong naming `field` (and `where`, e.g. the command) when `value` is longer than
    `limit` characters (`MAX_TEXT`; `MAX_NAME` for a name). None passes."""
    if value is not None and len(value) > limit:
        raise TextTooLong(field, f"at most {limit} characters, this one has {len(value)}", where=where)


def check_reason(command: str, reason: str | None, *, required: bool) -> None:
    """An operator's reason for `command`: TextTooLong past `MAX_TEXT`, then ReasonRequired when it is
    `required` and missing or blank. The one rule; `commands.require_reason` applies it per command."""
    check_length("reason", reason, where=command)
    if required and not (reason and reason.strip()):
        raise ReasonRequired(command)


def check_reason_chars(command: str, reason: str | None) -> None:
    """InvalidReason when `reason` holds a character `text_problem` refuses (PostgreSQL's text cannot
    hold NUL, nor a lone surrogate be encoded)."""
    if reason is not None and (problem := text_problem(reason)) is not None:
        raise InvalidReason(command, problem)


def escape_controls(text: str) -> str:
    """`text` with every character `text_problem` refuses written as an escape (``\\x00``): what
    an audit record stores of a refused input, whatever it held."""
    return _TEXT_REFUSED.sub(_escape, text)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _holds_as_is(text: str) -> bool:
    """Whether `text` has no NUL and no lone surrogate: checked in C (a regular expression's class
    costs tens of nanoseconds per character, a traceback has thousands)."""
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable(text: str | None, limit: int = MAX_STORED_TEXT) -> str | None:
    """`text` as the store can hold it on both databases: NUL and lone surrogates written as escapes
    (``\\x00``, ``\\udcff``), then cut to `limit` characters with a marker saying how many were left
    out. None stays None; a text that needs neither comes back as it is (the common case)."""
    if text is None:
        return None
    if not _holds_as_is(text):
        text = _UNSTORABLE.sub(_escape, text)
    if len(text) <= limit:
        return text
    kept = max(0, limit - len(f"... [{len(text)} more chars]"))  # room for the longest count
    return f"{text[:kept]}... [{len(text) - kept} more chars]"


def message_size_problem(size: int) -> str | None:
    """What makes a message of `size` bytes (its JSON as stored) too large (None: it fits)."""
    if size <= MAX_MESSAGE_BYTES:
        return None
    return (f"the message is {size} bytes, more than the {MAX_MESSAGE_BYTES} a job may carry: keep large "
            "payloads elsewhere and send their key")


def shorten(value: Any, limit: int) -> str:
    """`value` as text (str() of a non-string) in at most `limit` characters, the last an ellipsis
    ("\u2026") when it was cut: the one way a page, a drawing or a table shortens what it shows."""
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def clip(value: Any, limit: int = 200) -> str:
    """`value` as text (repr for a non-string) cut to `limit` characters, marked when cut."""
    text = value if isinstance(value, str) else repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... [{len(text) - limit} more chars]"
