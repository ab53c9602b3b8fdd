"""The state store's tables (SQLAlchemy Core). Alembic migrations create exactly these.

Times are seconds since the epoch as double precision, always taken from the database's clock
(see `reliable.store.db.now_expression`) so that worker clocks never decide a lease's fate.

Declared in three modules, all on one MetaData: store/metadata.py (the MetaData, the table prefix,
what migrations and applications ask of it), store/core_tables.py (jobs, events, effects, liveness,
worker processes, barriers) and store/feature_tables.py (alerts, API tokens, bulk operations,
workflows, schedules, limits, queue pauses, job stats). Import the tables from here.
"""

from __future__ import annotations

from .core_tables import (
    PARTIAL_JOB_INDEXES,
    barriers,
    effects,
    job_events,
    jobs,
    legacy_attempts,
    liveness,
    process_events,
    worker_processes,
)
from .feature_tables import (
    alerts,
    api_tokens,
    job_stats,
    limit_buckets,
    limit_events,
    limit_slots,
    limits,
    operations,
    queue_events,
    queue_pauses,
    schedule_events,
    schedule_slots,
    schedules,
    workflow_edges,
    workflow_events,
    workflow_nodes,
    workflows,
)
from .metadata import TABLE_PREFIX, alembic_include_name, metadata, on_dialect

__all__ = [
    "PARTIAL_JOB_INDEXES",
    "TABLE_PREFIX",
    "alembic_include_name",
    "alerts",
    "api_tokens",
    "barriers",
    "effects",
    "job_events",
    "job_stats",
    "jobs",
    "legacy_attempts",
    "limit_buckets",
    "limit_events",
    "limit_slots",
    "limits",
    "liveness",
    "metadata",
    "on_dialect",
    "operations",
    "process_events",
    "queue_events",
    "queue_pauses",
    "schedule_events",
    "schedule_slots",
    "schedules",
    "worker_processes",
    "workflow_edges",
    "workflow_events",
    "workflow_nodes",
    "workflows",
]
