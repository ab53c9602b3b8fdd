"""Alert state: the `reliable_alerts` table (see reliable.alerts.schema).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reliable_alerts",
        sa.Column("fingerprint", sa.String(64), primary_key=True),
        sa.Column("alertname", sa.String(255), nullable=False),
        sa.Column("labels", sa.Text, nullable=False),
        sa.Column("annotations", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("pending_since", sa.Double),
        sa.Column("starts_at", sa.Double),
        sa.Column("ends_at", sa.Double),
        sa.Column("last_evaluated_at", sa.Double),
        sa.Column("last_sent_at", sa.Double),
        sa.Column("next_send_at", sa.Double),
        sa.Column("send_attempts", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_error", sa.Text),
    )
    op.create_index("ix_reliable_alerts_state_next_send", "reliable_alerts", ["state", "next_send_at"])
    op.create_index("ix_reliable_alerts_alertname", "reliable_alerts", ["alertname"])


def downgrade() -> None:
    op.drop_table("reliable_alerts")
