"""The traceback a failed attempt records with its event: formatted once, secrets masked, bounded.

`failure_traceback(exc)` is the one place it is made: `traceback.format_exception` (chained
causes and contexts included), then `reliable.redact.redact_secrets`, then cut to `MAX_TRACEBACK`
characters keeping the head (the first exception of a chain, the outer frames) and the tail (the
innermost frames and the final exception line) with a marker saying how much was cut. Masking runs
before the cut, so a cut never leaves half a secret unmatched.

`failure_texts(exc)` formats a failure once for both its readers: the stored form above and the
form Dramatiq's Retries puts in the message's `traceback` option (`format_exception(limit=30)`,
unmasked, as Dramatiq does). The two are the same text unless a traceback in the chain has more
than 30 frames (or `sys.tracebacklimit` is set); only then is it formatted a second time.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from dataclasses import dataclass

from .redact import redact_secrets

__all__ = ["DRAMATIQ_FRAMES", "MAX_TRACEBACK", "FailureTexts", "bound_text", "failure_texts", "failure_traceback"]

#: The most characters a stored traceback keeps (16 KiB of ASCII).
MAX_TRACEBACK = 16 * 1024
#: The frames per traceback Dramatiq's Retries keeps in a message's `traceback` option.
DRAMATIQ_FRAMES = 30
#: Text longer than this is cut once before masking, so a message of megabytes costs no more to mask
#: than this much (the final cut removes everything near that first cut anyway).
_PRE_CUT = 8 * MAX_TRACEBACK


def bound_text(text: str, limit: int = MAX_TRACEBACK) -> str:
    """`text` if it fits in `limit` characters; else its head and tail around a marker naming how
    many characters were cut (the result fits in `limit`). The tail gets the larger part: the
    innermost frame and the exception's own line are what a reader needs first."""
    if len(text) <= limit:
        return text
    marker_room = 64
    keep = max(0, limit - marker_room)
    head = keep * 3 // 8
    tail = keep - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n... [{cut} characters cut] ...\n{text[len(text) - tail:]}"


@dataclass(frozen=True)
class FailureTexts:
    """A failed attempt's traceback, formatted once, in the two forms its readers take."""

    #: Dramatiq's form for the message's `traceback` option: at most DRAMATIQ_FRAMES frames per
    #: traceback, not masked (what Dramatiq's own Retries writes there).
    message: str
    #: The form the attempt's event stores: secrets masked, at most `limit` characters.
    stored: str


def failure_texts(exception: BaseException, *, limit: int = MAX_TRACEBACK) -> FailureTexts:
    """Format `exception` (with its chained causes) once, for the message and for the store."""
    try:
        formatted = traceback.TracebackException(type(exception), exception, exception.__traceback__, compact=True)
        text = "".join(formatted.format())
        if getattr(sys, "tracebacklimit", None) is None and _frames_fit(formatted, DRAMATIQ_FRAMES):
            message = text
        else:
            message = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__,
                                                         limit=DRAMATIQ_FRAMES))
    except Exception:  # a broken __str__ or __repr__ must not break failure handling
        text = message = (f"{type(exception).__module__}.{type(exception).__qualname__}: "
                          "<traceback could not be formatted>\n")
    return FailureTexts(message, _stored(text, limit))


def failure_traceback(exception: BaseException, *, limit: int = MAX_TRACEBACK) -> str:
    """The formatted traceback of `exception` with its chained causes: secrets masked, at most `limit` characters."""
    return failure_texts(exception, limit=limit).stored


def _stored(text: str, limit: int) -> str:
    text = text.replace("\x00", "\\0")  # PostgreSQL text cannot hold NUL
    return bound_text(redact_secrets(bound_text(text, _PRE_CUT)), limit)


def _frames_fit(formatted: traceback.TracebackException, frames: int) -> bool:
    """Whether no traceback in the chain (causes, contexts, a group's members) has more than `frames`
    frames: then formatting with that limit gives the same text."""
    return all(len(each.stack) <= frames for each in _chain(formatted))


def _chain(formatted: traceback.TracebackException) -> Iterator[traceback.TracebackException]:
    seen: set[int] = set()
    pending = [formatted]
    while pending:
        each = pending.pop()
        if id(each) in seen:
            continue
        seen.add(id(each))
        yield each
        pending.extend(e for e in (each.__cause__, each.__context__) if e is not None)
        pending.extend(getattr(each, "exceptions", None) or ())
