"""The durable state store: schema, migrations and the StateStore API.

StateStore is assembled from one class per caller's concern (reliable/store/store.py lists them);
code that needs one concern is typed with that class.
"""

from __future__ import annotations

from .claims import WorkerClaims
from .completion import WorkerCompletion
from .core import StoreCore
from .named_queries import NamedQueries
from .progress import WorkerProgress
from .reads import Reads
from .records import Attempt, Claim, Effect, ErrorInfo, FanIn, Job, JobEvent, LeaseStatus, NewJob, NodeResult
from .registration import Registrations
from .store import StateStore
from .sweeps import Sweeps
from .transitions import OperatorTransitions
from .unit_of_work import UnitOfWork

__all__ = [
    "Attempt",
    "Claim",
    "Effect",
    "ErrorInfo",
    "FanIn",
    "Job",
    "JobEvent",
    "LeaseStatus",
    "NamedQueries",
    "NewJob",
    "NodeResult",
    "OperatorTransitions",
    "Reads",
    "Registrations",
    "StateStore",
    "StoreCore",
    "Sweeps",
    "UnitOfWork",
    "WorkerClaims",
    "WorkerCompletion",
    "WorkerProgress",
]
