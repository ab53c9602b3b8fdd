"""The jobs' tables: jobs, their events and effects, the heartbeats' liveness, worker processes, barriers.

Times are seconds since the epoch as double precision, always taken from the database's clock
(see `reliable.store.db.now_expression`) so that worker clocks never decide a lease's fate.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    String,
    Table,
    Text,
    text,
)

from ..inputs import MAX_JOB_ID
from ..states import ACTIVE_STATES, UNFINISHED_STATES, JobStatus
from .alert_facts import UNCOUNTED_EVENTS
from .metadata import _BigId, audit_table, metadata

__all__ = ["PARTIAL_JOB_INDEXES", "barriers", "effects", "job_events", "jobs", "legacy_attempts", "liveness",
           "process_events", "worker_processes"]

jobs = Table(
    "reliable_jobs",
    metadata,
    Column("job_id", String(MAX_JOB_ID), primary_key=True),
    Column("queue", String(255), nullable=False),
    Column("actor", String(255), nullable=False),
    Column("message", Text, nullable=False),  # the Dramatiq message as JSON, for re-dispatch
    Column("status", String(16), nullable=False),
    Column("previous_status", String(16)),
    Column("version", BigInteger, nullable=False, server_default="1"),
    Column("lease_id", BigInteger, nullable=False, server_default="0"),  # the fencing token
    Column("worker_id", String(255)),
    Column("lease_expires_at", Double),
    Column("attempt", Integer, nullable=False, server_default="0"),
    Column("attempt_id", String(64)),
    Column("started_at", Double),
    Column("finished_at", Double),
    Column("retry_count", Integer, nullable=False, server_default="0"),
    Column("retry_at", Double),
    Column("scheduled_at", Double),  # when the job is due (enqueue, eta, retry_at)
    Column("dispatched_at", Double),  # when a message for it was last published
    Column("pause_requested", Boolean, nullable=False, server_default="0"),
    Column("stop_requested", Boolean, nullable=False, server_default="0"),
    Column("cancel_requested", Boolean, nullable=False, server_default="0"),
    Column("stop_requested_at", Double),
    Column("checkpoint", Text),  # JSON
    Column("checkpoint_version", Integer, nullable=False, server_default="0"),
    Column("checkpoint_schema", Integer),
    Column("checkpoint_at", Double),
    Column("owner", String(255)),
    Column("workflow_id", String(MAX_JOB_ID)),
    Column("trace_id", String(64)),
    Column("parent_job_id", String(MAX_JOB_ID)),
    Column("last_error_class", String(64)),
    Column("last_error_type", String(255)),
    Column("last_error_message", Text),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    # What a delivery must carry to claim the job (reliable.delivery_digest; migration 0013): NULL
    # for a job registered before it, never checked.
    Column("delivery_digest", String(64)),
)

def _in(states: frozenset[JobStatus]) -> str:
    return "status IN (" + ", ".join(f"'{state.value}'" for state in sorted(states)) + ")"


#: On PostgreSQL most job indexes are partial (migration 0007): each holds only the rows of the
#: states its queries ask for, so a transition maintains only what it must (a finish into
#: SUCCEEDED writes the primary key, (status, updated_at) and (actor, status), not nine indexes).
#: Their predicates, by index name; SQLite keeps full indexes (its planner uses a partial index
#: only when a query repeats the predicate word for word).
PARTIAL_JOB_INDEXES: dict[str, str] = {
    # the collector's counts by state and queue, the oldest due PENDING job
    # (the active states' counts come from (status, updated_at) INCLUDE (queue): a claim writes
    # one index entry fewer, migration 0018)
    "ix_reliable_jobs_status_queue_scheduled": _in(UNFINISHED_STATES - ACTIVE_STATES),
    # expired leases; with started_at and queue, stuck RUNNING jobs too (one index a claim writes,
    # not two: migration 0018)
    "ix_reliable_jobs_status_lease": _in(ACTIVE_STATES),
    "ix_reliable_jobs_status_retry": _in(frozenset({JobStatus.RETRY_WAIT})),  # retries past due
    "ix_reliable_jobs_status_dispatched": _in(frozenset({JobStatus.PENDING})),  # the sweeper's lost messages
    "ix_reliable_jobs_workflow": "workflow_id IS NOT NULL",
}


def _job_index(name: str, *columns: Column[Any], include: tuple[str, ...] = ()) -> Index:
    where = PARTIAL_JOB_INDEXES.get(name)
    options: dict[str, Any] = {"postgresql_where": text(where) if where else None}
    if include:
        options["postgresql_include"] = list(include)
    return Index(name, *columns, **options)


_job_index("ix_reliable_jobs_status_queue_scheduled", jobs.c.status, jobs.c.queue, jobs.c.scheduled_at)
_job_index("ix_reliable_jobs_status_lease", jobs.c.status, jobs.c.lease_expires_at, include=("started_at", "queue"))
_job_index("ix_reliable_jobs_status_retry", jobs.c.status, jobs.c.retry_at)
_job_index("ix_reliable_jobs_status_dispatched", jobs.c.status, jobs.c.dispatched_at)
# Every state: listings, purges. On PostgreSQL it carries the queue (migration 0009), so the
# overview counts the jobs that reached a final state within its window by queue from the index
# alone; every transition rewrites this entry anyway (status and updated_at change), so the queue
# costs bytes, not an extra index write.
_job_index("ix_reliable_jobs_status_updated", jobs.c.status, jobs.c.updated_at, include=("queue",))
_job_index("ix_reliable_jobs_actor_status", jobs.c.actor, jobs.c.status)  # every state: a listing by actor
_job_index("ix_reliable_jobs_workflow", jobs.c.workflow_id)

job_events = Table(
    "reliable_job_events",
    metadata,
    Column("id", _BigId, primary_key=True, autoincrement=True),
    Column("job_id", String(MAX_JOB_ID), nullable=False),
    Column("at", Double, nullable=False),
    Column("event", String(64), nullable=False),
    Column("from_status", String(16)),
    Column("to_status", String(16)),
    Column("version", BigInteger),
    Column("attempt", Integer),
    Column("attempt_id", String(64)),
    Column("lease_id", BigInteger),
    Column("worker_id", String(255)),
    Column("queue", String(255)),
    Column("actor", String(255)),
    Column("workflow_id", String(MAX_JOB_ID)),
    Column("trace_id", String(64)),
    Column("error_class", String(64)),
    Column("error_type", String(255)),
    Column("error_message", Text),
    Column("retry_count", Integer),
    Column("checkpoint", Text),
    Column("operator", String(255)),
    Column("reason", Text),
    Column("host", String(255)),
    Column("detail", Text),  # JSON: anything else worth keeping (rule matched, delay, ...)
    Column("traceback", Text),  # a failed attempt's traceback, bounded and masked (migration 0009)
)

# A job's events in id order (its history, its attempts, the retention purge). On PostgreSQL the
# primary key is (job_id, id), not (id) as declared here, and serves these reads (migration 0020):
# no query reads events by id alone, and each event row writes one index entry fewer. SQLite keeps
# this index (its id is the table's own row key: a primary key there costs no separate index).
Index("ix_reliable_job_events_job", job_events.c.job_id, job_events.c.id, info={"only_on": "sqlite"})
# Every count over a window names its event kinds (alert rules, the overview, the rate-limit count;
# alert_facts.check_counted): no index on `at` alone, which each event row paid an entry for, and on
# PostgreSQL no (event, at) entry for the kinds no count names (UNCOUNTED_EVENTS; migration 0019).
# SQLite keeps a full index (its planner uses a partial index only when a query repeats the predicate).
Index("ix_reliable_job_events_event_at", job_events.c.event, job_events.c.at,
      postgresql_where=text("event NOT IN (" + ", ".join(f"'{e}'" for e in UNCOUNTED_EVENTS) + ")"))

# What versions before migration 0018 wrote for each attempt. This version derives attempts from the
# events (store/job_history.attempts_of) and neither reads nor writes this table; 0018 keeps it so
# that workers of the previous version, still running through an upgrade, can go on claiming and
# committing (each of their claims inserts a row, each outcome updates it). A later migration drops it.
legacy_attempts = Table(
    "reliable_attempts",
    metadata,
    Column("attempt_id", String(64), primary_key=True),
    Column("job_id", String(MAX_JOB_ID), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("lease_id", BigInteger, nullable=False),
    Column("worker_id", String(255)),
    Column("started_at", Double, nullable=False),
    Column("ended_at", Double),
    Column("outcome", String(64)),
    Column("error_class", String(64)),
    Column("error_type", String(255)),
    Column("error_message", Text),
    Column("checkpoint_version_start", Integer),
)

Index("ix_reliable_attempts_job", legacy_attempts.c.job_id, legacy_attempts.c.attempt)

# A job's attempts have no table since migration 0018: they are read from its events
# (reliable/store/job_history.py).

effects = Table(
    "reliable_effects",
    metadata,
    Column("job_id", String(MAX_JOB_ID), primary_key=True),
    Column("op_key", String(512), primary_key=True),
    Column("attempt_id", String(64)),
    Column("lease_id", BigInteger),
    Column("applied_at", Double, nullable=False),
    Column("result", Text),
    Column("duplicates", Integer, nullable=False, server_default="0"),
    Column("last_duplicate_at", Double),
)

# One row: when any heartbeat last reached the store, and when an outage ended (migration 0005).
liveness = Table(
    "reliable_liveness",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("last_beat_at", Double),
    Column("outage_ended_at", Double),
)

# One row per worker process (migration 0014): who holds leases, written at boot, stamped by every
# heartbeat, marked exited at a clean stop or when its death is certain (reliable.worker.processes).
worker_processes = Table(
    "reliable_worker_processes",
    metadata,
    Column("worker_id", String(255), primary_key=True),  # host:pid:random, as on the job rows
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("start_ticks", BigInteger),  # /proc/<pid>/stat field 22: tells a reused pid apart
    # <boot_id>/<pid namespace inode> (reliable.worker.processes.pid_space): pids of another boot or
    # pid namespace (another container on the host) mean nothing here
    Column("boot_id", String(64)),
    # the host's random id of this boot (reliable.worker.host_instance, migration 0022): clones of
    # one memory snapshot share host name and boot id, not this
    Column("host_instance", String(64)),
    Column("queues", Text),  # JSON list; NULL: every queue
    Column("threads", Integer),
    Column("supervisor_pid", Integer),  # `reliable worker`'s pid, when a child of it
    Column("started_at", Double, nullable=False),
    Column("last_beat_at", Double, nullable=False),
    Column("exited_at", Double),
    Column("exit_reason", String(64)),  # stopped | pid_gone | pid_reused
    Column("exit_observed_by", String(255)),  # the process that saw it (its worker id)
    # migration 0023: the jobs its threads run now (JSON [[job_id, thread], ...], written by its heartbeat)
    Column("busy", Text),
    Column("slot", Integer),  # a `reliable worker` child's slot
    Column("restarts", Integer),  # children its slot had before it (the supervisor's count)
    # the last operator command (quiet | stop, reliable.process_commands), and when the process saw it
    Column("command", String(16)),
    Column("command_at", Double),
    Column("command_operator", String(255)),
    Column("command_reason", Text),
    Column("command_seen_at", Double),
)

Index("ix_reliable_worker_processes_host", worker_processes.c.host, worker_processes.c.boot_id)
Index("ix_reliable_worker_processes_exited", worker_processes.c.exited_at)  # the fleet's recent exits (0023)

# The audit trail of the commands on worker processes (migration 0023): quiet, stop, command_refused.
process_events = audit_table("reliable_process_events", "worker_id")

Index("ix_reliable_process_events_worker", process_events.c.worker_id, process_events.c.id)

# The completion barrier of a Dramatiq group with completion callbacks (migration 0006).
barriers = Table(
    "reliable_barriers",
    metadata,
    Column("barrier_id", String(64), primary_key=True),
    Column("parties", Integer, nullable=False),
    Column("remaining", Integer, nullable=False),
    Column("created_at", Double, nullable=False),
)
