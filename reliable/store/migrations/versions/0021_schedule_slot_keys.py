"""reliable_schedules.slot_key and slot_conflicts: slot job ids nobody outside the store can predict.

A slot's job id was a uuid5 of the schedule's name and the slot time: anyone who could publish
computed the next one and sent a message ahead under it, which then ran as the slot. Now it is an
HMAC of the name and the slot under `slot_key`, a random secret of each schedule, created by the
first decision that needs it under the schedule's row lock (reliable.schedules.storage) and never
returned by a listing. `slot_conflicts` counts the slots whose id was found taken by a job with
other content (exported as reliable_schedule_slot_conflicts_total).

Revision ID: 0021
Revises: 0020
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("reliable_schedules", sa.Column("slot_key", sa.String(64)))
    op.add_column("reliable_schedules", sa.Column("slot_conflicts", sa.Integer, nullable=False,
                                                  server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("reliable_schedules") as batch:
        batch.drop_column("slot_conflicts")
        batch.drop_column("slot_key")
