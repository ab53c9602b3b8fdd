"""Worker processes: busy threads, the supervisor's slot and restarts, operator commands; operator limits.

reliable_worker_processes gains
- `busy`: JSON [[job_id, thread name], ...], the jobs this process's threads run now, written by its
  heartbeat when it changes (the jobs' rows say which process holds them; only the thread was missing);
- `slot`, `restarts`: a `reliable worker` child's slot and how many children that slot had before
  it (the supervisor's own count: a restart is counted on the slot that restarted, never on a sibling);
- `command`, `command_at`, `command_operator`, `command_reason`, `command_seen_at`: the last
  operator command for the process (quiet: take no new message; stop: a graceful shutdown), and
  when its heartbeat picked it up.
reliable_process_events is the commands' audit trail (quiet, stop, command_refused), as
reliable_queue_events is the queues'.

reliable_limits gains `ceiling`, an operator's concurrency for the actor (reliable.limits.operator): the
effective concurrency and its adaptive restores stay at or below it; reliable_limit_events is the
audit trail of those changes.

Revision ID: 0023
Revises: 0022
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("busy", sa.Text),
    ("slot", sa.Integer),
    ("restarts", sa.Integer),
    ("command", sa.String(16)),
    ("command_at", sa.Double),
    ("command_operator", sa.String(255)),
    ("command_reason", sa.Text),
    ("command_seen_at", sa.Double),
)


def upgrade() -> None:
    for name, kind in _COLUMNS:
        op.add_column("reliable_worker_processes", sa.Column(name, kind))
    op.create_index("ix_reliable_worker_processes_exited", "reliable_worker_processes", ["exited_at"])
    op.create_table(
        "reliable_process_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("worker_id", sa.String(255), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("operator", sa.String(255)),
        sa.Column("host", sa.String(255)),
        sa.Column("source", sa.String(64)),
        sa.Column("reason", sa.Text),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_reliable_process_events_worker", "reliable_process_events", ["worker_id", "id"])
    op.add_column("reliable_limits", sa.Column("ceiling", sa.Integer))
    op.create_table(
        "reliable_limit_events",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("at", sa.Double, nullable=False),
        sa.Column("event", sa.String(32), nullable=False),
        sa.Column("operator", sa.String(255)),
        sa.Column("host", sa.String(255)),
        sa.Column("source", sa.String(64)),
        sa.Column("reason", sa.Text),
        sa.Column("detail", sa.Text),
    )
    op.create_index("ix_reliable_limit_events_name", "reliable_limit_events", ["name", "id"])


def downgrade() -> None:
    op.drop_index("ix_reliable_limit_events_name", table_name="reliable_limit_events")
    op.drop_table("reliable_limit_events")
    with op.batch_alter_table("reliable_limits") as batch:
        batch.drop_column("ceiling")
    op.drop_index("ix_reliable_process_events_worker", table_name="reliable_process_events")
    op.drop_table("reliable_process_events")
    op.drop_index("ix_reliable_worker_processes_exited", table_name="reliable_worker_processes")
    with op.batch_alter_table("reliable_worker_processes") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
