"""One event index entry fewer per event on PostgreSQL: the primary key is (job_id, id), not (id).

Every event row wrote an entry in its primary key (id) and one in (job_id, id). No query reads the
events by id alone: a job's events are read by job_id in id order (its history, its attempts, the
retention purge), the counts over a window by (event, at) (migration 0019). So on PostgreSQL the
primary key becomes (job_id, id) and takes the place of ix_reliable_job_events_job: each event
writes one btree entry fewer (a durable job, claim and outcome: two of its ten index entries,
about a tenth of its WAL records). The id still comes from the table's sequence, unique alone as
before; (job_id, id) is unique with it. SQLite is left as it is: there the id is the row's own
key (the table is stored by it), so its primary key costs no separate index.

The new key is built under the table's lock, as in 0007 and 0019 (docs/operations.md): on a large
event table, run the upgrade when writes can wait for it.

Revision ID: 0020
Revises: 0019
"""

from __future__ import annotations

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None

_TABLE = "reliable_job_events"
_PKEY = "reliable_job_events_pkey"  # PostgreSQL's name for 0001's unnamed primary key
_BY_JOB = "ix_reliable_job_events_job"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_constraint(_PKEY, _TABLE, type_="primary")
    op.drop_index(_BY_JOB, table_name=_TABLE)
    op.create_primary_key(_PKEY, _TABLE, ["job_id", "id"])


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_constraint(_PKEY, _TABLE, type_="primary")
    op.create_primary_key(_PKEY, _TABLE, ["id"])
    op.create_index(_BY_JOB, _TABLE, ["job_id", "id"])
