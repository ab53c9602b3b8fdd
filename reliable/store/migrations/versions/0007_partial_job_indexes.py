"""Partial job indexes on PostgreSQL: a transition maintains only the indexes of its states.

Every update of a job row used to write all nine of its indexes (no update can be HOT: the status
is indexed), so a job's claim and finish cost 18 index insertions, most of them for states the job
was leaving. Each secondary index now holds only the states its queries read
(`reliable.store.schema.PARTIAL_JOB_INDEXES`): a finish into SUCCEEDED writes the primary key,
(status, updated_at) and (actor, status), which stay full for listings; a claim, six. SQLite
keeps its full indexes. The indexes are rebuilt under the table's lock: see docs/operations.md.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

# The predicates as of this revision (written out: a later change to schema.py must not rewrite history).
_PARTIAL = {
    "ix_reliable_jobs_status_queue_scheduled": (
        ["status", "queue", "scheduled_at"],
        "status IN ('DEAD', 'PAUSED', 'PENDING', 'RETRY_WAIT', 'REVIEW', 'RUNNING', 'STOPPED', 'STOPPING')"),
    "ix_reliable_jobs_status_started_queue": (["status", "started_at", "queue"], "status IN ('RUNNING')"),
    "ix_reliable_jobs_status_lease": (["status", "lease_expires_at"], "status IN ('RUNNING', 'STOPPING')"),
    "ix_reliable_jobs_status_retry": (["status", "retry_at"], "status IN ('RETRY_WAIT')"),
    "ix_reliable_jobs_status_dispatched": (["status", "dispatched_at"], "status IN ('PENDING')"),
    "ix_reliable_jobs_workflow": (["workflow_id"], "workflow_id IS NOT NULL"),
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, (columns, where) in _PARTIAL.items():
        op.drop_index(name, table_name="reliable_jobs")
        op.create_index(name, "reliable_jobs", columns, postgresql_where=sa.text(where))


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, (columns, _where) in _PARTIAL.items():
        op.drop_index(name, table_name="reliable_jobs")
        op.create_index(name, "reliable_jobs", columns)
