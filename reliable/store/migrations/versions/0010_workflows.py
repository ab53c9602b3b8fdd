"""Workflows: a DAG of jobs with partial resume (reliable.workflows).

- reliable_workflows: one row per submitted workflow; its status is derived from its nodes and kept
  for listings, `hold` is an operator's pause/stop/cancel of the whole workflow, `run` counts
  resumes and restarts, `checked_at` orders the recovery loop's sweep.
- reliable_workflow_nodes: the node's message (registered as a PENDING job once its parents allow),
  the digest of its inputs, its current job id (chosen when that job is registered, under the
  workflow's lock: no message can pose as a node that has not started) and the job's result once
  it succeeded.
- reliable_workflow_edges: parent -> child, with the parent's place in the child's `after` (the
  order its results are passed in).
- reliable_workflow_events: submission, status changes and operators' commands.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "reliable_workflows",
        sa.Column("workflow_id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("hold", sa.String(16)),
        sa.Column("run", sa.Integer, nullable=False, server_default="1"),
        sa.Column("owner", sa.String(255)),
        sa.Column("created_by", sa.String(255)),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
        sa.Column("finished_at", sa.Double),
        sa.Column("checked_at", sa.Double, nullable=False),
    )
    op.create_index("ix_reliable_workflows_status_checked", "reliable_workflows", ["status", "checked_at"])
    op.create_index("ix_reliable_workflows_created", "reliable_workflows", ["created_at"])
    op.create_table(
        "reliable_workflow_nodes",
        sa.Column("workflow_id", sa.String(64), primary_key=True),
        sa.Column("node", sa.String(255), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("owner", sa.String(255)),
        sa.Column("checkpoint_schema", sa.Integer),
        sa.Column("code_version", sa.String(64)),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("trigger", sa.String(16), nullable=False),
        sa.Column("on_upstream_failure", sa.String(8), nullable=False),
        sa.Column("pass_results", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("job_id", sa.String(64)),
        sa.Column("run", sa.Integer, nullable=False, server_default="1"),
        sa.Column("result", sa.Text),
        sa.Column("result_note", sa.Text),
    )
    op.create_index("ix_reliable_workflow_nodes_job", "reliable_workflow_nodes", ["job_id"], unique=True)
    op.create_table(
        "reliable_workflow_edges",
        sa.Column("workflow_id", sa.String(64), primary_key=True),
        sa.Column("parent", sa.String(255), primary_key=True),
        sa.Column("child", sa.String(255), primary_key=True),
        sa.Column("position", sa.Integer, nullable=False),
    )
    op.create_table(
        "reliable_workflow_events",
        sa.Column("id", _BigId, primary_key=True, autoincrement=True),
        sa.Column("workflow_id", sa.String(64), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("event", sa.String(64), nullable=False),
        sa.Column("from_status", sa.String(16)),
        sa.Column("to_status", sa.String(16)),
        sa.Column("run", sa.Integer),
        sa.Column("operator", sa.String(255)),
        sa.Column("source", sa.String(64)),
        sa.Column("reason", sa.Text),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_reliable_workflow_events_workflow", "reliable_workflow_events", ["workflow_id", "id"])


def downgrade() -> None:
    op.drop_table("reliable_workflow_events")
    op.drop_table("reliable_workflow_edges")
    op.drop_index("ix_reliable_workflow_nodes_job", table_name="reliable_workflow_nodes")
    op.drop_table("reliable_workflow_nodes")
    op.drop_index("ix_reliable_workflows_created", table_name="reliable_workflows")
    op.drop_index("ix_reliable_workflows_status_checked", table_name="reliable_workflows")
    op.drop_table("reliable_workflows")
