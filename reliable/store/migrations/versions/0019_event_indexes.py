"""Two event index entries fewer per durable job: no (at) index, (event, at) without the uncounted kinds.

Each event row wrote four index entries: the primary key, (job_id, id), (at) and (event, at). No
query reads the events by time alone: every count over a window names its kinds (the alert rules,
the overview's series, the rate-limit count), which (event, at) serves, and a job's own events are
read through (job_id, id). So (at) goes. On PostgreSQL (event, at) also leaves out the kinds no
query counts by kind (schema.UNCOUNTED_EVENTS: a claim, a registration, a checkpoint save), which
every job writes: a durable job (claim, outcome) writes five event index entries, not eight.
SQLite keeps a full (event, at) index. The index is rebuilt under the table's lock, as in 0007
(docs/operations.md): on a large event table, run the upgrade when writes can wait for it.

Revision ID: 0019
Revises: 0018
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

_TABLE = "reliable_job_events"
_EVENT_AT = "ix_reliable_job_events_event_at"
# As of this revision (written out: a later change to schema.py must not rewrite history).
_COUNTED = "event NOT IN ('checkpoint', 'claim', 'enqueued')"


def upgrade() -> None:
    op.drop_index("ix_reliable_job_events_at", table_name=_TABLE)
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index(_EVENT_AT, table_name=_TABLE)
    op.create_index(_EVENT_AT, _TABLE, ["event", "at"], postgresql_where=sa.text(_COUNTED))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index(_EVENT_AT, table_name=_TABLE)
        op.create_index(_EVENT_AT, _TABLE, ["event", "at"])
    op.create_index("ix_reliable_job_events_at", _TABLE, ["at"])
