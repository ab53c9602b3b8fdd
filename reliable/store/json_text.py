"""JSON and text as the store writes them: event details, effect results, error messages, checkpoints."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

__all__ = ["checkpoint_json"]

#: The longest error message an event or job row keeps.
_MAX_ERROR_TEXT = 2000


def _detail(detail: Mapping[str, Any] | None) -> str | None:
    return _json_text(dict(detail)) if detail else None


def _json_text(value: Any) -> str | None:
    # default=str: details and effect results are diagnostics, never state an attempt resumes from.
    return None if value is None else json.dumps(value, default=str, separators=(",", ":"))


def _truncate(text: str | None, limit: int = _MAX_ERROR_TEXT) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 15] + "... [truncated]"


def checkpoint_json(value: Any) -> str:
    """`value` as JSON text; TypeError naming the offending type and where, unless it round-trips.

    A checkpoint must come back exactly as it was saved: None, bool, int, finite float, str, and
    lists and dicts (with str keys) of those. A tuple, set, datetime, Decimal, bytes or any object
    would come back as something else (or as its str()), so it is refused instead.
    """
    _check_json(value, "checkpoint")
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


def _check_json(value: Any, where: str) -> None:
    if value is None or isinstance(value, bool | str):
        return
    if isinstance(value, int) and type(value) is int:
        return
    if type(value) is float:
        if not math.isfinite(value):
            raise TypeError(f"{where} is {value!r}: JSON has no NaN or infinity")
        return
    if type(value) is list:
        for index, item in enumerate(value):
            _check_json(item, f"{where}[{index}]")
        return
    if type(value) is dict:
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{where} has a {type(key).__name__} key {key!r}: JSON object keys are strings "
                                "(it would come back as a str)")
            _check_json(item, f"{where}[{key!r}]")
        return
    raise TypeError(
        f"{where} is a {type(value).__module__}.{type(value).__qualname__}, which does not round-trip "
        "through JSON (use None, bool, int, float, str, list or dict with str keys; convert it, or declare "
        "a checkpoint_codec on the actor)"
    )
