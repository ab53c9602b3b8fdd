"""reliable_liveness: when any worker's heartbeat last reached the store, and when an outage ended.

One row. Every heartbeat stamps `last_beat_at`; a heartbeat that finds the previous one older than
its lease TTL (nobody could renew anything for that long) stamps `outage_ended_at`, and recovery
expires no lease within a TTL of it: heartbeats renew first. Kept in the store, so a recovery
process that did not see the outage (`reliable recover --once` from cron, a worker started later)
holds expiry too.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    table = op.create_table(
        "reliable_liveness",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("last_beat_at", sa.Double),
        sa.Column("outage_ended_at", sa.Double),
    )
    op.bulk_insert(table, [{"id": 1, "last_beat_at": None, "outage_ended_at": None}])


def downgrade() -> None:
    op.drop_table("reliable_liveness")
