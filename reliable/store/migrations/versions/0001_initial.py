"""Initial schema: jobs, job events, attempts, effects.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "reliable_jobs",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("previous_status", sa.String(16)),
        sa.Column("version", sa.BigInteger, nullable=False, server_default="1"),
        sa.Column("lease_id", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("worker_id", sa.String(255)),
        sa.Column("lease_expires_at", sa.Double),
        sa.Column("attempt", sa.Integer, nullable=False, server_default="0"),
        sa.Column("attempt_id", sa.String(64)),
        sa.Column("started_at", sa.Double),
        sa.Column("finished_at", sa.Double),
        sa.Column("retry_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("retry_at", sa.Double),
        sa.Column("scheduled_at", sa.Double),
        sa.Column("dispatched_at", sa.Double),
        sa.Column("pause_requested", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("stop_requested", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("stop_requested_at", sa.Double),
        sa.Column("checkpoint", sa.Text),
        sa.Column("checkpoint_version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("checkpoint_schema", sa.Integer),
        sa.Column("checkpoint_at", sa.Double),
        sa.Column("owner", sa.String(255)),
        sa.Column("workflow_id", sa.String(64)),
        sa.Column("trace_id", sa.String(64)),
        sa.Column("parent_job_id", sa.String(64)),
        sa.Column("last_error_class", sa.String(64)),
        sa.Column("last_error_type", sa.String(255)),
        sa.Column("last_error_message", sa.Text),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_index("ix_reliable_jobs_status_queue", "reliable_jobs", ["status", "queue"])
    op.create_index("ix_reliable_jobs_status_lease", "reliable_jobs", ["status", "lease_expires_at"])
    op.create_index("ix_reliable_jobs_status_retry", "reliable_jobs", ["status", "retry_at"])
    op.create_index("ix_reliable_jobs_status_dispatched", "reliable_jobs", ["status", "dispatched_at"])
    op.create_index("ix_reliable_jobs_status_updated", "reliable_jobs", ["status", "updated_at"])
    op.create_index("ix_reliable_jobs_actor_status", "reliable_jobs", ["actor", "status"])
    op.create_index("ix_reliable_jobs_workflow", "reliable_jobs", ["workflow_id"])

    op.create_table(
        "reliable_job_events",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("from_status", sa.String(16)),
        sa.Column("to_status", sa.String(16)),
        sa.Column("version", sa.BigInteger),
        sa.Column("attempt", sa.Integer),
        sa.Column("attempt_id", sa.String(64)),
        sa.Column("lease_id", sa.BigInteger),
        sa.Column("worker_id", sa.String(255)),
        sa.Column("queue", sa.String(255)),
        sa.Column("actor", sa.String(255)),
        sa.Column("workflow_id", sa.String(64)),
        sa.Column("trace_id", sa.String(64)),
        sa.Column("error_class", sa.String(64)),
        sa.Column("error_type", sa.String(255)),
        sa.Column("error_message", sa.Text),
        sa.Column("retry_count", sa.Integer),
        sa.Column("checkpoint", sa.Text),
        sa.Column("operator", sa.String(255)),
        sa.Column("reason", sa.Text),
        sa.Column("host", sa.String(255)),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_reliable_job_events_job", "reliable_job_events", ["job_id", "id"])
    op.create_index("ix_reliable_job_events_at", "reliable_job_events", ["at"])
    op.create_index("ix_reliable_job_events_event_at", "reliable_job_events", ["event", "at"])

    op.create_table(
        "reliable_attempts",
        sa.Column("attempt_id", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("lease_id", sa.BigInteger, nullable=False),
        sa.Column("worker_id", sa.String(255)),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("ended_at", sa.Double),
        sa.Column("outcome", sa.String(64)),
        sa.Column("error_class", sa.String(64)),
        sa.Column("error_type", sa.String(255)),
        sa.Column("error_message", sa.Text),
        sa.Column("checkpoint_version_start", sa.Integer),
    )
    op.create_index("ix_reliable_attempts_job", "reliable_attempts", ["job_id", "attempt"])

    op.create_table(
        "reliable_effects",
        sa.Column("job_id", sa.String(64), primary_key=True),
        sa.Column("op_key", sa.String(512), primary_key=True),
        sa.Column("attempt_id", sa.String(64)),
        sa.Column("lease_id", sa.BigInteger),
        sa.Column("applied_at", sa.Double, nullable=False),
        sa.Column("result", sa.Text),
        sa.Column("duplicates", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_duplicate_at", sa.Double),
    )


def downgrade() -> None:
    op.drop_table("reliable_effects")
    op.drop_table("reliable_attempts")
    op.drop_table("reliable_job_events")
    op.drop_table("reliable_jobs")
