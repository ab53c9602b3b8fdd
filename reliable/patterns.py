"""Regular expressions that come from users, run in linear time: RE2 (google-re2), never Python's `re`.

A policy rule's `message` is searched in every failure's text on a worker. Python's `re` backtracks:
`(a+)+$` against forty a's and a "!" runs for minutes while holding the GIL, so every thread of the
worker process stops, its heartbeat included, and its leases expire. RE2 matches in time linear in
the text and has no backtracking; the price is its syntax: no backreferences (`\\1`, `(?P=name)`) and
no lookaround (`(?=`, `(?!`, `(?<=`, `(?<!`). Such a pattern is refused when the file is loaded, with
the reason. And a search reads at most the first `MAX_SEARCHED_CHARS` characters of the text.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import re2  # type: ignore[import-untyped]

__all__ = ["MAX_SEARCHED_CHARS", "UserPattern", "compile_pattern"]

#: How much of a text (an exception's message) a pattern is searched in: its first characters.
MAX_SEARCHED_CHARS = 4096

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print each refused pattern to stderr; the error says it instead
_HINTS = (
    (("(?=", "(?!", "(?<=", "(?<!"), "lookaround ((?=, (?!, (?<=, (?<!) is not supported"),
    (("\\1", "\\2", "\\3", "\\4", "\\5", "\\6", "\\7", "\\8", "\\9", "(?P="), "backreferences are not supported"),
)


@dataclass(frozen=True)
class UserPattern:
    """A compiled user pattern: `search(text)` looks in the first MAX_SEARCHED_CHARS characters of text."""

    pattern: str
    compiled: Any = field(compare=False, repr=False)

    def search(self, text: str) -> bool:
        """Whether the pattern is found in the first MAX_SEARCHED_CHARS characters of `text` (linear time)."""
        return self.compiled.search(text[:MAX_SEARCHED_CHARS]) is not None


def compile_pattern(pattern: str) -> UserPattern:
    """Compile `pattern` with RE2; ValueError saying why it cannot run in linear time (or is malformed)."""
    try:
        return UserPattern(pattern, re2.compile(pattern, _OPTIONS))
    except re2.error as exc:
        detail = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        hints = [hint for needles, hint in _HINTS if any(needle in pattern for needle in needles)]
        why = "; ".join([*hints, detail])
        raise ValueError(f"bad regular expression {pattern!r}: {why} (patterns run on RE2, in time linear in "
                         "the message: no backreferences, no lookaround)") from None
