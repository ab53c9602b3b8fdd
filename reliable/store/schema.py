"""The state store's tables (SQLAlchemy Core). Alembic migrations create exactly these.

Times are seconds since the epoch as double precision, always taken from the database's clock
(see `reliable.store.db.now_expression`) so that worker clocks never decide a lease's fate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    text,
)

from ..inputs import MAX_JOB_ID
from ..states import ACTIVE_STATES, UNFINISHED_STATES, JobStatus
from .alert_facts import UNCOUNTED_EVENTS

__all__ = [
    "PARTIAL_JOB_INDEXES",
    "TABLE_PREFIX",
    "alembic_include_name",
    "alerts",
    "api_tokens",
    "barriers",
    "effects",
    "job_events",
    "jobs",
    "limit_buckets",
    "limit_slots",
    "limits",
    "liveness",
    "metadata",
    "on_dialect",
    "operations",
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

#: Every table reliable owns (its Alembic version table too) starts with it.
TABLE_PREFIX = "reliable_"

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY.
_BigId = BigInteger().with_variant(Integer(), "sqlite")

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

# Every alert's lifecycle and delivery state, so none is lost (migration 0002).
alerts = Table(
    "reliable_alerts",
    metadata,
    Column("fingerprint", String(64), primary_key=True),  # hash of the label set
    Column("alertname", String(255), nullable=False),
    Column("labels", Text, nullable=False),  # JSON object
    Column("annotations", Text, nullable=False),  # JSON object
    Column("state", String(16), nullable=False),  # pending | firing | resolved
    Column("pending_since", Double),
    Column("starts_at", Double),
    Column("ends_at", Double),
    Column("last_evaluated_at", Double),
    Column("last_sent_at", Double),
    Column("next_send_at", Double),
    Column("send_attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
)

Index("ix_reliable_alerts_state_next_send", alerts.c.state, alerts.c.next_send_at)
Index("ix_reliable_alerts_alertname", alerts.c.alertname)

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
)

Index("ix_reliable_worker_processes_host", worker_processes.c.host, worker_processes.c.boot_id)

# The completion barrier of a Dramatiq group with completion callbacks (migration 0006).
barriers = Table(
    "reliable_barriers",
    metadata,
    Column("barrier_id", String(64), primary_key=True),
    Column("parties", Integer, nullable=False),
    Column("remaining", Integer, nullable=False),
    Column("created_at", Double, nullable=False),
)


# API tokens of the HTTP API and console (migration 0009): only a hash of the secret is kept.
api_tokens = Table(
    "reliable_api_tokens",
    metadata,
    Column("token_id", String(32), primary_key=True),  # the public part of the token
    Column("name", String(255), nullable=False),  # the identity every action is audited under
    Column("secret_hash", String(64), nullable=False),  # sha256 of the secret part, hex
    Column("role", String(32), nullable=False),  # viewer | operator | admin
    Column("queues", Text, nullable=False),  # JSON list of glob patterns the role applies to
    Column("owners", Text, nullable=False),  # JSON list of glob patterns of job owners
    Column("created_at", Double, nullable=False),
    Column("created_by", String(255)),
    Column("expires_at", Double),
    Column("revoked_at", Double),
    Column("revoked_by", String(255)),
    Column("last_used_at", Double),
)

Index("ix_reliable_api_tokens_name", api_tokens.c.name)

# Bulk operations of the HTTP API (migration 0009): counted, confirmed, run with progress, cancellable.
operations = Table(
    "reliable_operations",
    metadata,
    Column("operation_id", String(32), primary_key=True),
    Column("command", String(32), nullable=False),
    Column("filter", Text, nullable=False),  # JSON: the filter the operator gave
    Column("job_ids", Text, nullable=False),  # JSON list: the jobs counted at preview, acted on at confirm
    Column("options", Text, nullable=False),  # JSON: command options (resolution, allow duplicates...)
    Column("reason", Text, nullable=False),
    Column("operator", String(255), nullable=False),
    Column("source", String(64)),
    # refused | awaiting_confirmation | expired | running | finished | cancelled | interrupted | failed
    Column("status", String(32), nullable=False),
    Column("total", Integer, nullable=False),
    Column("done", Integer, nullable=False, server_default="0"),
    Column("counts", Text),  # JSON: results per outcome
    Column("results", Text),  # JSON list: one entry per job acted on (job, outcome, message)
    Column("rate", Double),
    Column("created_at", Double, nullable=False),
    Column("expires_at", Double, nullable=False),
    Column("confirmed_at", Double),
    Column("confirmed_by", String(255)),
    Column("finished_at", Double),
    Column("cancel_requested", Boolean, nullable=False, server_default="0"),
    Column("cancelled_by", String(255)),
    Column("confirm_token_hash", String(64)),  # sha256 of the confirmation token (the token is shown once)
    Column("updated_at", Double),  # the run's heartbeat: a `running` row long without one was interrupted
    Column("error", Text),  # why it was refused, or how its run ended early
)

Index("ix_reliable_operations_created", operations.c.created_at)

# Workflows (migration 0010): a DAG of jobs. The workflow's status is derived from its nodes
# (reliable.workflows.planning) and kept here for listings; `hold` is an operator's pause, stop or
# cancel of the whole workflow (no node starts while it stands).
workflows = Table(
    "reliable_workflows",
    metadata,
    Column("workflow_id", String(64), primary_key=True),
    Column("name", String(255), nullable=False),
    Column("status", String(16), nullable=False),
    Column("hold", String(16)),  # pause | stop | cancel, or NULL
    Column("run", Integer, nullable=False, server_default="1"),  # bumped by each resume or restart
    Column("owner", String(255)),
    Column("created_by", String(255)),
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),  # the status last changed
    Column("finished_at", Double),
    Column("checked_at", Double, nullable=False),  # last advanced: the recovery loop's sweep order
)

Index("ix_reliable_workflows_status_checked", workflows.c.status, workflows.c.checked_at)
Index("ix_reliable_workflows_created", workflows.c.created_at)

# One row per node: the job it runs now (job_id is assigned before the job exists, so registering
# it is idempotent), the message to register it with, and the digest of its inputs.
workflow_nodes = Table(
    "reliable_workflow_nodes",
    metadata,
    Column("workflow_id", String(64), primary_key=True),
    Column("node", String(255), primary_key=True),
    Column("position", Integer, nullable=False),  # declaration order
    Column("actor", String(255), nullable=False),
    Column("queue", String(255), nullable=False),
    Column("message", Text, nullable=False),  # JSON: the Dramatiq message to register (args, kwargs, options)
    Column("owner", String(255)),
    Column("checkpoint_schema", Integer),
    Column("code_version", String(64)),
    Column("digest", String(64), nullable=False),  # sha256 of actor, queue, args, kwargs, code version
    Column("trigger", String(16), nullable=False),  # all_succeeded | all_done
    Column("on_upstream_failure", String(8), nullable=False),  # fail | skip
    Column("pass_results", Boolean, nullable=False, server_default="0"),
    Column("job_id", String(64)),  # chosen when the node's job is registered (NULL before it starts)
    Column("run", Integer, nullable=False, server_default="1"),
    Column("result", Text),  # JSON: the job's return value (size-bounded)
    Column("result_note", Text),  # why a succeeded node has no stored result
)

Index("ix_reliable_workflow_nodes_job", workflow_nodes.c.job_id, unique=True)

workflow_edges = Table(
    "reliable_workflow_edges",
    metadata,
    Column("workflow_id", String(64), primary_key=True),
    Column("parent", String(255), primary_key=True),
    Column("child", String(255), primary_key=True),
    Column("position", Integer, nullable=False),  # the parent's place in the child's `after`
)

# The workflow's own history: submission, status changes, operators' commands (audited).
workflow_events = Table(
    "reliable_workflow_events",
    metadata,
    Column("id", _BigId, primary_key=True, autoincrement=True),
    Column("workflow_id", String(64), nullable=False),
    Column("at", Double, nullable=False),
    Column("event", String(64), nullable=False),
    Column("from_status", String(16)),
    Column("to_status", String(16)),
    Column("run", Integer),
    Column("operator", String(255)),
    Column("source", String(64)),
    Column("reason", Text),
    Column("detail", Text),  # JSON
)

Index("ix_reliable_workflow_events_workflow", workflow_events.c.workflow_id, workflow_events.c.id)


# Schedules (migration 0011): one row per declared schedule, its slots (the primary key makes a
# slot fire once however many schedulers run) and its audit trail (reliable.schedules).
schedules = Table(
    "reliable_schedules",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("actor", String(255), nullable=False),
    Column("queue", String(255), nullable=False),
    Column("definition", Text, nullable=False),  # JSON: the declaration (Schedule.definition)
    Column("template", Text, nullable=False),  # JSON: the job a slot registers, built where the actor is imported
    Column("paused", Boolean, nullable=False, server_default="0"),
    Column("decided_until", Double, nullable=False),  # every slot up to it fired or was dropped by the misfire policy
    Column("next_slot", Double),  # the first slot after decided_until (what schedulers and the alert look at)
    Column("last_slot", Double),  # the last slot that fired
    Column("created_at", Double, nullable=False),
    Column("updated_at", Double, nullable=False),
    # Migration 0021: the secret slot job ids are derived from (set by the first decision; never
    # listed) and how many slots found their id taken by another job.
    Column("slot_key", String(64)),
    Column("slot_conflicts", Integer, nullable=False, server_default="0"),
)

schedule_slots = Table(
    "reliable_schedule_slots",
    metadata,
    Column("schedule", String(255), primary_key=True),
    Column("slot_at", Double, primary_key=True),  # the slot's UTC instant, whole seconds
    Column("job_id", String(64), nullable=False),  # HMAC of schedule, slot under slot_key: one slot, one job
    Column("kind", String(16), nullable=False),  # on_time | missed (fired by the misfire policy)
    Column("fired_at", Double, nullable=False),
)

Index("ix_reliable_schedule_slots_fired", schedule_slots.c.fired_at)

schedule_events = Table(
    "reliable_schedule_events",
    metadata,
    Column("id", _BigId, primary_key=True, autoincrement=True),
    Column("schedule", String(255), nullable=False),
    Column("at", Double, nullable=False),
    Column("event", String(32), nullable=False),  # declared, redeclared, pause, resume, trigger, misfire, slot_conflict
    Column("operator", String(255)),
    Column("reason", Text),
    Column("host", String(255)),
    Column("detail", Text),  # JSON
)

Index("ix_reliable_schedule_events_schedule", schedule_events.c.schedule, schedule_events.c.id)

# Limits (migration 0012, reliable.limits): per actor its declared and effective concurrency; a
# concurrency limit of N is N slot rows per key, a rate limit K bucket rows per key (sharded: one
# hot row would serialise a fleet).
limits = Table(
    "reliable_limits",
    metadata,
    Column("name", String(255), primary_key=True),  # the actor
    Column("declared", Integer, nullable=False),
    Column("effective", Integer, nullable=False),  # lowered under sustained rate limiting
    Column("streak", Integer, nullable=False, server_default="0"),  # rate-limited failures in a row
    Column("last_rate_limited_at", Double),
    Column("changed_at", Double),
    Column("updated_at", Double, nullable=False),
)

limit_slots = Table(
    "reliable_limit_slots",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("slot", Integer, primary_key=True),
    # Held while holder_job's attempt with lease holder_lease is live, or until expires_at (the
    # window between taking the slot and the claim): a killed worker's slot frees itself.
    Column("holder_job", String(255)),  # a job id (reliable.inputs.MAX_JOB_ID, migration 0016)
    Column("holder_lease", BigInteger),
    Column("expires_at", Double),
)

limit_buckets = Table(
    "reliable_limit_buckets",
    metadata,
    Column("name", String(255), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("bucket", Integer, primary_key=True),
    Column("tokens", Double, nullable=False),  # as of updated_at; refilled on read
    Column("updated_at", Double, nullable=False),
)

# Queue pauses (migration 0017, reliable.queue_pauses): a row while an operator keeps the queue
# paused (workers defer its deliveries), and the queue commands' audit trail.
queue_pauses = Table(
    "reliable_queue_pauses",
    metadata,
    Column("queue", String(255), primary_key=True),
    Column("paused_at", Double, nullable=False),
    Column("operator", String(255), nullable=False),
    Column("host", String(255)),
    Column("source", String(64)),
    Column("reason", Text, nullable=False),
)

queue_events = Table(
    "reliable_queue_events",
    metadata,
    Column("id", _BigId, primary_key=True, autoincrement=True),
    Column("queue", String(255), nullable=False),
    Column("at", Double, nullable=False),
    Column("event", String(32), nullable=False),  # pause | resume | command_refused
    Column("operator", String(255)),
    Column("host", String(255)),
    Column("source", String(64)),
    Column("reason", Text),
    Column("detail", Text),  # JSON
)

Index("ix_reliable_queue_events_queue", queue_events.c.queue, queue_events.c.id)


def on_dialect(item: object, dialect: str) -> bool:
    """Whether the migrations create this table or index on `dialect` (an index declared for one
    dialect only says so in its info: `only_on`). For comparing a migrated database with `metadata`."""
    only_on = item.info.get("only_on") if isinstance(item, (Table, Index)) else None
    return only_on is None or only_on == dialect


def alembic_include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """For an application's own Alembic ``env.py``: ``context.configure(..., include_name=alembic_include_name)``
    leaves reliable's tables out of autogenerate (``reliable db upgrade`` migrates them)."""
    return not (type_ == "table" and name is not None and name.startswith(TABLE_PREFIX))
