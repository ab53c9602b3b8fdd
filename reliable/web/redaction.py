"""Masking argument fields for read-only callers: keys matching glob patterns, at any depth."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import Any

from ..redact import MASK

__all__ = ["redact_value"]


def _matches(key: str, patterns: Sequence[str]) -> bool:
    lowered = key.lower()
    return any(fnmatch.fnmatchcase(lowered, p.lower()) for p in patterns)


def redact_value(value: Any, patterns: Sequence[str]) -> Any:
    """A copy of `value` (JSON-like) with the value of every mapping key matching `patterns` masked.

    Positional arguments have no names, so they are kept; keyword arguments and nested objects
    are masked by key.
    """
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _matches(k, patterns) else redact_value(v, patterns)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v, patterns) for v in value]
    return value
