"""A concurrency slot's holder_job of up to 255 characters, as every other job id column (0015).

Migration 0015 widened the job id columns to VARCHAR(255) (reliable.inputs.MAX_JOB_ID) but left
`reliable_limit_slots.holder_job` at VARCHAR(64): on PostgreSQL a job with a longer id (such as
``"invoice-" + sha256``, 72 characters) of an actor with a concurrency limit could not take a slot
(value too long), so its claim failed at every delivery and it never ran.

The same change as 0015: PostgreSQL ALTER COLUMN ... TYPE VARCHAR(255) (binary coercible: no
rewrite); SQLite, which does not enforce a VARCHAR's length, has the declared type changed in its
schema text, in place.

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

TABLE, COLUMN = "reliable_limit_slots", "holder_job"


def _sqlite_retype(bind: sa.Connection, old: int, new: int) -> None:
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        sql = bind.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                                   (TABLE,)).scalar_one()
        sql = re.sub(rf'(\b|"){COLUMN}("?\s+)VARCHAR\({old}\)', rf"\g<1>{COLUMN}\g<2>VARCHAR({new})", sql)
        bind.exec_driver_sql("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (sql, TABLE))
        bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def _retype(old: int, new: int) -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        _sqlite_retype(bind, old, new)
        return
    op.alter_column(TABLE, COLUMN, type_=sa.String(new), existing_type=sa.String(old))


def upgrade() -> None:
    _retype(64, 255)


def downgrade() -> None:
    _retype(255, 64)  # PostgreSQL refuses it while a longer id is held: nothing is cut
