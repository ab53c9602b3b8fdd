"""The HTTP API and console: API tokens, bulk operations, and the traceback of a failed attempt.

- reliable_api_tokens: one row per token; only the sha256 of its secret is kept, so a copy of the
  database does not hand out working tokens. Revoked and expired tokens stay, for the audit trail.
- reliable_operations: a bulk command as a named operation: counted at preview (the job ids are kept,
  so the confirmation acts on exactly what the operator saw counted), confirmed with a token of
  which only the sha256 is kept, then run with progress (updated_at is the run's heartbeat),
  cancellation and a record of each job's outcome.
- reliable_job_events.traceback: the traceback of a failed attempt, bounded and masked, on the event
  that ended it.
- ix_reliable_jobs_status_updated carries the queue on PostgreSQL (INCLUDE): the overview counts
  final states by queue within its window from the index alone (docs/performance.md).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _status_updated_index(include: list[str]) -> None:
    """Rebuild (status, updated_at) with `include` (PostgreSQL only: SQLite has no INCLUDE)."""
    if op.get_context().dialect.name != "postgresql":
        return
    op.drop_index("ix_reliable_jobs_status_updated", table_name="reliable_jobs")
    op.create_index("ix_reliable_jobs_status_updated", "reliable_jobs", ["status", "updated_at"],
                    postgresql_include=include)


def upgrade() -> None:
    op.add_column("reliable_job_events", sa.Column("traceback", sa.Text))
    _status_updated_index(["queue"])
    op.create_table(
        "reliable_api_tokens",
        sa.Column("token_id", sa.String(32), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("queues", sa.Text, nullable=False),
        sa.Column("owners", sa.Text, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("created_by", sa.String(255)),
        sa.Column("expires_at", sa.Double),
        sa.Column("revoked_at", sa.Double),
        sa.Column("revoked_by", sa.String(255)),
        sa.Column("last_used_at", sa.Double),
    )
    op.create_index("ix_reliable_api_tokens_name", "reliable_api_tokens", ["name"])
    op.create_table(
        "reliable_operations",
        sa.Column("operation_id", sa.String(32), primary_key=True),
        sa.Column("command", sa.String(32), nullable=False),
        sa.Column("filter", sa.Text, nullable=False),
        sa.Column("job_ids", sa.Text, nullable=False),
        sa.Column("options", sa.Text, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("operator", sa.String(255), nullable=False),
        sa.Column("source", sa.String(64)),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("total", sa.Integer, nullable=False),
        sa.Column("done", sa.Integer, nullable=False, server_default="0"),
        sa.Column("counts", sa.Text),
        sa.Column("results", sa.Text),
        sa.Column("rate", sa.Double),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("expires_at", sa.Double, nullable=False),
        sa.Column("confirmed_at", sa.Double),
        sa.Column("confirmed_by", sa.String(255)),
        sa.Column("finished_at", sa.Double),
        sa.Column("cancel_requested", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("cancelled_by", sa.String(255)),
        sa.Column("confirm_token_hash", sa.String(64)),
        sa.Column("updated_at", sa.Double),
        sa.Column("error", sa.Text),
    )
    op.create_index("ix_reliable_operations_created", "reliable_operations", ["created_at"])


def downgrade() -> None:
    _status_updated_index([])
    op.drop_index("ix_reliable_operations_created", table_name="reliable_operations")
    op.drop_table("reliable_operations")
    op.drop_index("ix_reliable_api_tokens_name", table_name="reliable_api_tokens")
    op.drop_table("reliable_api_tokens")
    with op.batch_alter_table("reliable_job_events") as batch:
        batch.drop_column("traceback")
