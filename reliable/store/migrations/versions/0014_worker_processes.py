"""reliable_worker_processes: one row per worker process.

Written when the process boots (host, pid, the process's start time in clock ticks, the kernel's
boot id, queues, threads, the supervisor's pid), stamped by every heartbeat (in the renewal's own
statement), marked exited at a clean stop or when the process's death is certain (its pid gone, or
now another process's). A worker starting on a host releases the leases of its dead neighbours at
once (reliable.worker.processes) instead of waiting for their lease TTL.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "reliable_worker_processes",
        sa.Column("worker_id", sa.String(255), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("start_ticks", sa.BigInteger),
        sa.Column("boot_id", sa.String(64)),
        sa.Column("queues", sa.Text),
        sa.Column("threads", sa.Integer),
        sa.Column("supervisor_pid", sa.Integer),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("last_beat_at", sa.Double, nullable=False),
        sa.Column("exited_at", sa.Double),
        sa.Column("exit_reason", sa.String(64)),
        sa.Column("exit_observed_by", sa.String(255)),
    )
    op.create_index("ix_reliable_worker_processes_host", "reliable_worker_processes", ["host", "boot_id"])


def downgrade() -> None:
    op.drop_index("ix_reliable_worker_processes_host", table_name="reliable_worker_processes")
    op.drop_table("reliable_worker_processes")
