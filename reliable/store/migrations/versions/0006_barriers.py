"""reliable_barriers: the completion barrier of a Dramatiq group, kept in the store.

`group.run()` creates the barrier with the number of members (`parties`); each member's success
decrements `remaining` in the transaction that commits it, and the one that reaches 0 registers
the group's completion callbacks in that same transaction. A member commits its success once
(a compare-and-set), so the count is exact and no crash between a commit and a publish loses the
callbacks (Dramatiq's own barrier lives in its rate-limiter backend, outside that transaction).

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reliable_barriers",
        sa.Column("barrier_id", sa.String(64), primary_key=True),
        sa.Column("parties", sa.Integer, nullable=False),
        sa.Column("remaining", sa.Integer, nullable=False),
        sa.Column("created_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reliable_barriers")
