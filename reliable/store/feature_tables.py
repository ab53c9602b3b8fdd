"""The features' tables: alerts, API tokens, bulk operations, workflows, schedules, limits, queue pauses,
job stats.

Times are seconds since the epoch as double precision, taken from the database's clock.
"""

from __future__ import annotations

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
)

from .metadata import _BigId, audit_table, metadata

__all__ = ["STAT_BUCKETS", "alerts", "api_tokens", "job_stats", "limit_buckets", "limit_events", "limit_slots",
           "limits", "operations", "queue_events", "queue_pauses", "schedule_events", "schedule_slots", "schedules",
           "workflow_edges", "workflow_events", "workflow_nodes", "workflows"]

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
    # an operator's concurrency (reliable.limits.operator, migration 0023): effective and its restores
    # stay at or below it; NULL: the declared one rules
    Column("ceiling", Integer),
)

# The audit trail of the operators' limit changes (migration 0023): concurrency_set, concurrency_cleared,
# command_refused.
limit_events = audit_table("reliable_limit_events", "name")  # the subject: the actor

Index("ix_reliable_limit_events_name", limit_events.c.name, limit_events.c.id)

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

queue_events = audit_table("reliable_queue_events", "queue")  # pause | resume | command_refused

Index("ix_reliable_queue_events_queue", queue_events.c.queue, queue_events.c.id)

# Latency and outcome history (migration 0024, reliable.store.job_stats): per bucket of `resolution`
# seconds, queue and actor, the attempts that ended by outcome and two fixed log-scale histograms
# (wait: due to claim; run: claim to the attempt's end). Written by the worker processes in one
# statement per flush; bounded by each resolution's horizon (job_stats.RESOLUTIONS).
STAT_BUCKETS = 28
job_stats = Table(
    "reliable_job_stats",
    metadata,
    Column("resolution", Integer, primary_key=True),  # seconds: 60, 900 or 3600
    Column("bucket", BigInteger, primary_key=True),  # epoch seconds of the bucket's start
    Column("queue", String(255), primary_key=True),
    Column("actor", String(255), primary_key=True),
    Column("succeeded", Integer, nullable=False, server_default="0"),
    Column("failed", Integer, nullable=False, server_default="0"),  # FAILED, DEAD or REVIEW
    Column("retried", Integer, nullable=False, server_default="0"),  # RETRY_WAIT
    Column("other", Integer, nullable=False, server_default="0"),  # paused, stopped, cancelled, expired
    Column("wait_sum", Double, nullable=False, server_default="0"),
    Column("run_sum", Double, nullable=False, server_default="0"),
    *(Column(f"w{i:02d}", Integer, nullable=False, server_default="0") for i in range(STAT_BUCKETS)),
    *(Column(f"r{i:02d}", Integer, nullable=False, server_default="0") for i in range(STAT_BUCKETS)),
)
# A chart reads one (queue, actor) level's buckets: the all-queues rows only, not every queue's.
Index("ix_reliable_job_stats_level", job_stats.c.queue, job_stats.c.actor, job_stats.c.resolution, job_stats.c.bucket)
