"""reliable: durable job state, leases with fencing, checkpoints and operator control for Dramatiq.

Heavy parts (SQLAlchemy, the middleware, policies) load on first use, so `import reliable` and the
`reliable` command start fast.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    ClaimRefused,
    ConfigError,
    ControlRefused,
    JobCancelled,
    JobForceStopped,
    JobIdConflict,
    JobInterrupted,
    JobNotFound,
    JobPaused,
    JobStopped,
    LeaseLost,
    MessageRefused,
    PolicyError,
    ReasonRequired,
    RegistrationFailed,
    ReliableError,
    ScheduleNotFound,
    SendTimedOut,
    StoreError,
    StoreMisconfigured,
    StoreNotMigrated,
    StoreUnavailable,
    TransitionRefused,
    WorkflowResultUnavailable,
)
from .states import Event, JobStatus

if TYPE_CHECKING:
    from .events import JsonFormatter
    from .limits import Limits
    from .middleware import ReliableMiddleware
    from .policy import Policy
    from .recovery import Recovery
    from .schedules import Schedule
    from .store import StateStore
    from .worker.context import JobContext, current_job
    from .worker.install import install
    from .workflows import Workflow, node, workflow
    from .workflows.engine import WorkflowEngine

__version__ = "0.1.0"

_LAZY = {
    "JobContext": ".worker.context",
    "current_job": ".worker.context",
    "JsonFormatter": ".events",
    "install": ".worker.install",
    "Limits": ".limits",
    "ReliableMiddleware": ".middleware",
    "Policy": ".policy",
    "Recovery": ".recovery",
    "Schedule": ".schedules",
    "StateStore": ".store",
    "Workflow": ".workflows",
    "WorkflowEngine": ".workflows.engine",
    "node": ".workflows",
    "workflow": ".workflows",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'reliable' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


__all__ = [
    "ClaimRefused",
    "ConfigError",
    "ControlRefused",
    "Event",
    "JobCancelled",
    "JobContext",
    "JobForceStopped",
    "JobIdConflict",
    "JobInterrupted",
    "JobNotFound",
    "JobPaused",
    "JobStatus",
    "JobStopped",
    "JsonFormatter",
    "LeaseLost",
    "Limits",
    "MessageRefused",
    "Policy",
    "PolicyError",
    "ReasonRequired",
    "Recovery",
    "RegistrationFailed",
    "ReliableError",
    "ReliableMiddleware",
    "Schedule",
    "ScheduleNotFound",
    "SendTimedOut",
    "StateStore",
    "StoreError",
    "StoreMisconfigured",
    "StoreNotMigrated",
    "StoreUnavailable",
    "TransitionRefused",
    "Workflow",
    "WorkflowEngine",
    "WorkflowResultUnavailable",
    "__version__",
    "current_job",
    "install",
    "node",
    "workflow",
]
