"""reliable_job_stats: latency and outcome history kept by the store, bounded in size.

Per bucket (60 s, 15 min, 1 h and 1 day resolutions), queue and actor (and per queue, and for
all queues): the attempts that ended by outcome
and two fixed log-scale histograms (wait from due to claim, run from claim to the attempt's end),
from which the console and the API read p50/p95 and the 1 h / 24 h / 7 d charts without scanning
jobs or events. Written by the worker processes (reliable.worker.stats), one statement per flush;
each resolution is kept for a fixed horizon (reliable.store.job_stats.RESOLUTIONS) and `reliable
db prune` deletes what is older.

Revision ID: 0024
Revises: 0023
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

#: The histograms' buckets, as reliable.store.feature_tables.STAT_BUCKETS when this was written.
_BUCKETS = 28


def upgrade() -> None:
    counts = [sa.Column(name, sa.Integer, nullable=False, server_default="0")
              for name in ("succeeded", "failed", "retried", "other")]
    sums = [sa.Column(name, sa.Double, nullable=False, server_default="0") for name in ("wait_sum", "run_sum")]
    histograms = [sa.Column(f"{kind}{i:02d}", sa.Integer, nullable=False, server_default="0")
                  for kind in ("w", "r") for i in range(_BUCKETS)]
    op.create_table(
        "reliable_job_stats",
        sa.Column("resolution", sa.Integer, primary_key=True),
        sa.Column("bucket", sa.BigInteger, primary_key=True),
        sa.Column("queue", sa.String(255), primary_key=True),
        sa.Column("actor", sa.String(255), primary_key=True),
        *counts, *sums, *histograms,
    )
    op.create_index("ix_reliable_job_stats_level", "reliable_job_stats", ["queue", "actor", "resolution", "bucket"])


def downgrade() -> None:
    op.drop_table("reliable_job_stats")
