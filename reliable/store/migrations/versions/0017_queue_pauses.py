"""reliable_queue_pauses and reliable_queue_events: an operator's pause of a whole queue, and its audit.

A row in reliable_queue_pauses means the queue is paused: workers defer its deliveries (no claim,
no attempt spent, no thread held) until the row is gone (reliable.queue_pauses). Every pause,
resume and refused command on a queue is a row of reliable_queue_events (who, when, from where, why).

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reliable_queue_pauses",
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("paused_at", sa.Double, nullable=False),
        sa.Column("operator", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255)),
        sa.Column("source", sa.String(64)),
        sa.Column("reason", sa.Text, nullable=False),
    )
    op.create_table(
        "reliable_queue_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("operator", sa.String(255)),
        sa.Column("host", sa.String(255)),
        sa.Column("source", sa.String(64)),
        sa.Column("reason", sa.Text),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_reliable_queue_events_queue", "reliable_queue_events", ["queue", "id"])


def downgrade() -> None:
    op.drop_index("ix_reliable_queue_events_queue", table_name="reliable_queue_events")
    op.drop_table("reliable_queue_events")
    op.drop_table("reliable_queue_pauses")
