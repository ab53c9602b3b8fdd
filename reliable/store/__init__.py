"""The durable state store: schema, migrations and the StateStore API."""

from __future__ import annotations

from .records import Attempt, Claim, Effect, ErrorInfo, FanIn, Job, JobEvent, LeaseStatus, NewJob, NodeResult
from .store import StateStore
from .unit_of_work import UnitOfWork

__all__ = [
    "Attempt", "Claim", "Effect", "ErrorInfo", "FanIn", "Job", "JobEvent", "LeaseStatus", "NewJob", "NodeResult",
    "StateStore", "UnitOfWork",
]
