"""Job ids of up to 255 characters (reliable.inputs.MAX_JOB_ID): the columns that hold one.

A producer's business id such as ``"invoice-" + sha256`` (72 characters) did not fit VARCHAR(64)
on PostgreSQL: its registration failed. Every column that holds a job id (or a workflow id, which
may be a pipeline's first job id) becomes VARCHAR(255).

PostgreSQL: ALTER COLUMN ... TYPE VARCHAR(255); a longer varchar rewrites neither the table nor
its indexes (binary coercible), so it is quick on a big table. SQLite does not enforce a VARCHAR's
length; only the declared type in the schema text changes, in place (the documented procedure of
https://sqlite.org/lang_altertable.html#otheralter for changes that leave the stored data as it
is), so the reflected schema matches the code's metadata without copying a table.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

# The columns as of this revision (written out: a later change to schema.py must not rewrite history).
COLUMNS: dict[str, tuple[str, ...]] = {
    "reliable_jobs": ("job_id", "workflow_id", "parent_job_id"),
    "reliable_job_events": ("job_id", "workflow_id"),
    "reliable_attempts": ("job_id",),
    "reliable_effects": ("job_id",),
}


def _sqlite_retype(bind: sa.Connection, old: int, new: int) -> None:
    version = bind.exec_driver_sql("PRAGMA schema_version").scalar_one()
    bind.exec_driver_sql("PRAGMA writable_schema = ON")
    try:
        for table, columns in COLUMNS.items():
            sql = bind.exec_driver_sql("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                                       (table,)).scalar_one()
            for column in columns:
                sql = re.sub(rf'(\b|"){column}("?\s+)VARCHAR\({old}\)', rf"\g<1>{column}\g<2>VARCHAR({new})", sql)
            bind.exec_driver_sql("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = ?", (sql, table))
        bind.exec_driver_sql(f"PRAGMA schema_version = {int(version) + 1}")
    finally:
        bind.exec_driver_sql("PRAGMA writable_schema = OFF")


def _retype(old: int, new: int) -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        _sqlite_retype(bind, old, new)
        return
    for table, columns in COLUMNS.items():
        for column in columns:
            op.alter_column(table, column, type_=sa.String(new), existing_type=sa.String(old))


def upgrade() -> None:
    _retype(64, 255)


def downgrade() -> None:
    _retype(255, 64)  # PostgreSQL refuses it while a longer id is stored: nothing is cut
