"""PostgreSQL with a linguistic collation: an index for job id prefixes in character order.

`reliable jobs show 3f2a9c1e` finds ids by prefix with a range in character order (COLLATE "C"):
a linguistic collation (ICU, glibc's en_US.UTF-8) sorts ':', '[', '{' and DEL before digits and
letters, so a range in the database's own order misses ids. The primary key's index serves the
character-order range only when the database's collation is C or POSIX; otherwise this index does.
It exists only on such databases (job_id never changes, so it costs one insertion per new job).

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

INDEX = "ix_reliable_jobs_job_id_c"


def _character_order_collation(bind: sa.Connection) -> bool:
    provider = bind.execute(sa.text(
        "SELECT datcollate, datlocprovider FROM pg_database WHERE datname = current_database()")).one()
    return provider.datlocprovider == "c" and provider.datcollate in ("C", "POSIX", "C.UTF-8", "C.utf8")


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql" or _character_order_collation(bind):
        return
    op.execute(f'CREATE INDEX IF NOT EXISTS {INDEX} ON reliable_jobs (job_id COLLATE "C")')


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP INDEX IF EXISTS {INDEX}")
