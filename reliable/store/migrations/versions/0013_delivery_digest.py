"""A delivery must match its job: the digest of what a job's message runs.

- reliable_jobs.delivery_digest: the digest of the actor, arguments and behaviour-choosing options
  of the message registered with the job (reliable.delivery_digest). A claim by a delivery whose
  digest differs is refused (`delivery_mismatch`); a job registered before this revision has none
  and is never checked.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("reliable_jobs", sa.Column("delivery_digest", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("reliable_jobs") as batch:
        batch.drop_column("delivery_digest")
