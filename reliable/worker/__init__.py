"""Everything that runs inside a producer or worker process, for Dramatiq (docs/architecture.md).

`middleware` adapts Dramatiq's hooks; each step has its module: `settings` (constructor options),
`plans` (per actor), `registration` (message -> job), `admission` (limits), `claim`, `outcome`
(pure: how an attempt ended -> the event), `completion` (the fenced write), `after_commit`,
`runtime` (per process: store, heartbeat, recovery thread), `context` (what an actor sees).

The names below load on first use: `reliable.worker.outcome` or `.registration` can be imported
without the middleware (workflows, schedules and recovery do).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import JobContext, current_job
    from .install import install
    from .middleware import ReliableMiddleware

__all__ = ["JobContext", "ReliableMiddleware", "current_job", "install"]

_LAZY = {"JobContext": ".context", "current_job": ".context", "install": ".install",
         "ReliableMiddleware": ".middleware"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reliable.worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
