"""Concurrency and rate limits across worker processes, kept in the store (docs/limits.md).

`model` declares and validates (pure), `adaptive` decides when concurrency goes down and back up
(pure), `storage` holds slots, token buckets and the adaptive state in the store, and `gate` is
what the middleware calls around a delivery. Only the pure parts load with this package.
"""

from __future__ import annotations

from .adaptive import AdaptiveSettings, LimitState
from .model import Limits, LimitSpec, limit_spec

__all__ = ["AdaptiveSettings", "LimitSpec", "LimitState", "Limits", "limit_spec"]
