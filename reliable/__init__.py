"""reliable: durable job state, leases with fencing, checkpoints and operator control for Dramatiq."""

from __future__ import annotations

from .context import JobContext, current_job
from .errors import (
    ClaimRefused,
    ConfigError,
    ControlRefused,
    JobCancelled,
    JobForceStopped,
    JobInterrupted,
    JobNotFound,
    JobPaused,
    JobStopped,
    LeaseLost,
    PolicyError,
    ReliableError,
    StoreError,
    StoreNotMigrated,
    StoreUnavailable,
    TransitionRefused,
)
from .install import install
from .middleware import ReliableMiddleware
from .policy import Policy
from .recovery import Recovery
from .states import Event, JobStatus
from .store import StateStore

__version__ = "0.1.0"

__all__ = [
    "ClaimRefused",
    "ConfigError",
    "ControlRefused",
    "Event",
    "JobCancelled",
    "JobContext",
    "JobForceStopped",
    "JobInterrupted",
    "JobNotFound",
    "JobPaused",
    "JobStatus",
    "JobStopped",
    "LeaseLost",
    "Policy",
    "PolicyError",
    "Recovery",
    "ReliableError",
    "ReliableMiddleware",
    "StateStore",
    "StoreError",
    "StoreNotMigrated",
    "StoreUnavailable",
    "TransitionRefused",
    "__version__",
    "current_job",
    "install",
]
