"""The traceback a failed attempt records with its event: formatted once, secrets masked, bounded.

`failure_traceback(exc)` is the one place it is made: `traceback.format_exception` (chained
causes and contexts included), then `reliable.redact.redact_secrets`, then cut to `MAX_TRACEBACK`
characters keeping the head (the first exception of a chain, the outer frames) and the tail (the
innermost frames and the final exception line) with a marker saying how much was cut. Masking runs
before the cut, so a cut never leaves half a secret unmatched.
"""

from __future__ import annotations

import traceback

from .redact import redact_secrets

__all__ = ["MAX_TRACEBACK", "bound_text", "failure_traceback"]

#: The most characters a stored traceback keeps (16 KiB of ASCII).
MAX_TRACEBACK = 16 * 1024
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


def failure_traceback(exception: BaseException, *, limit: int = MAX_TRACEBACK) -> str:
    """The formatted traceback of `exception` with its chained causes: secrets masked, at most `limit` characters."""
    try:
        text = "".join(traceback.format_exception(type(exception), exception, exception.__traceback__))
    except Exception:  # a broken __str__ or __repr__ must not break failure handling
        text = f"{type(exception).__module__}.{type(exception).__qualname__}: <traceback could not be formatted>\n"
    text = text.replace("\x00", "\\0")  # PostgreSQL text cannot hold NUL
    return bound_text(redact_secrets(bound_text(text, _PRE_CUT)), limit)
