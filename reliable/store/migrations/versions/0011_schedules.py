"""Schedules: recurring jobs that fire exactly once per slot (reliable.schedules).

- reliable_schedules: one row per declared schedule: its declaration and the job template a slot
  registers (built at worker boot, where the actor is imported), paused, and how far its slots are
  decided (decided_until, next_slot, last_slot).
- reliable_schedule_slots: one row per fired slot; its primary key (schedule, slot_at) is what
  makes a slot fire once however many schedulers run.
- reliable_schedule_events: the audit trail: declarations, pause, resume, trigger (who, why,
  when) and the misfire decisions after a downtime.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "reliable_schedules",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("queue", sa.String(255), nullable=False),
        sa.Column("definition", sa.Text, nullable=False),
        sa.Column("template", sa.Text, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False, server_default="0"),
        sa.Column("decided_until", sa.Double, nullable=False),
        sa.Column("next_slot", sa.Double),
        sa.Column("last_slot", sa.Double),
        sa.Column("created_at", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "reliable_schedule_slots",
        sa.Column("schedule", sa.String(255), primary_key=True),
        sa.Column("slot_at", sa.Double, primary_key=True),
        sa.Column("job_id", sa.String(64), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("fired_at", sa.Double, nullable=False),
    )
    op.create_index("ix_reliable_schedule_slots_fired", "reliable_schedule_slots", ["fired_at"])
    op.create_table(
        "reliable_schedule_events",
        sa.Column("id", _BigId, primary_key=True, autoincrement=True),
        sa.Column("schedule", sa.String(255), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("operator", sa.String(255)),
        sa.Column("reason", sa.Text),
        sa.Column("host", sa.String(255)),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_reliable_schedule_events_schedule", "reliable_schedule_events", ["schedule", "id"])


def downgrade() -> None:
    op.drop_index("ix_reliable_schedule_events_schedule", table_name="reliable_schedule_events")
    op.drop_table("reliable_schedule_events")
    op.drop_index("ix_reliable_schedule_slots_fired", table_name="reliable_schedule_slots")
    op.drop_table("reliable_schedule_slots")
    op.drop_table("reliable_schedules")
