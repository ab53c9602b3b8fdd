"""Limits: concurrency and rate limits held across worker processes (reliable.limits).

- reliable_limits: per actor its declared and effective concurrency and its rate-limited streak.
- reliable_limit_slots: N rows per (actor, key) for a concurrency limit of N; a slot is held by a
  job's attempt (job id + lease id, judged against the job's lease by the database clock).
- reliable_limit_buckets: K token buckets per (actor, key) for a rate limit, 1/K of the tokens each.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reliable_limits",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("declared", sa.Integer, nullable=False),
        sa.Column("effective", sa.Integer, nullable=False),
        sa.Column("streak", sa.Integer, nullable=False, server_default="0"),
        sa.Column("last_rate_limited_at", sa.Double),
        sa.Column("changed_at", sa.Double),
        sa.Column("updated_at", sa.Double, nullable=False),
    )
    op.create_table(
        "reliable_limit_slots",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("slot", sa.Integer, primary_key=True),
        sa.Column("holder_job", sa.String(64)),
        sa.Column("holder_lease", sa.BigInteger),
        sa.Column("expires_at", sa.Double),
    )
    op.create_table(
        "reliable_limit_buckets",
        sa.Column("name", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(255), primary_key=True),
        sa.Column("bucket", sa.Integer, primary_key=True),
        sa.Column("tokens", sa.Double, nullable=False),
        sa.Column("updated_at", sa.Double, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reliable_limit_buckets")
    op.drop_table("reliable_limit_slots")
    op.drop_table("reliable_limits")
