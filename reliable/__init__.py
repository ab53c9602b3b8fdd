"""reliable: durable job state, leases with fencing, checkpoints and operator control for Dramatiq."""

from __future__ import annotations

from .errors import (
    ClaimRefused,
    ConfigError,
    ControlRefused,
    JobCancelled,
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
from .states import Event, JobStatus
from .store import StateStore

__version__ = "0.1.0"

__all__ = [
    "ClaimRefused",
    "ConfigError",
    "ControlRefused",
    "Event",
    "JobCancelled",
    "JobInterrupted",
    "JobNotFound",
    "JobPaused",
    "JobStatus",
    "JobStopped",
    "LeaseLost",
    "PolicyError",
    "ReliableError",
    "StateStore",
    "StoreError",
    "StoreNotMigrated",
    "StoreUnavailable",
    "TransitionRefused",
    "__version__",
]
