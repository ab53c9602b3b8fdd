"""Attempts read from the job's events (reliable_attempts goes); two job indexes a claim skips.

Every attempt was written twice: a row of reliable_attempts (inserted by the claim, updated by the
outcome) and the claim's and outcome's event rows, which carry the same attempt id, number, lease,
worker, times, outcome and error. The store now derives attempts from the events in one read
(reliable/store/job_history.py), so a durable job writes two rows and two index entries fewer per
attempt. Nothing is lost: the events of every attempt the table held are still there. The downgrade
rebuilds the table from those events (the same derivation, in SQL).

A claim (PENDING -> RUNNING) wrote six job index entries, two of them in indexes only some reads
need: (status, queue, scheduled_at) held the active states for the collector's counts, which
(status, updated_at) INCLUDE (queue) answers as well, and (status, started_at, queue) held the
RUNNING jobs for the stuck-job counts, which the expired-lease index answers once it carries
started_at and queue (it holds the active jobs only: a few per worker thread). On PostgreSQL the
first loses the active states and the second goes into the third; SQLite (full indexes) drops
the second. The indexes are rebuilt under the table's lock, as in 0007 (docs/operations.md).

Revision ID: 0018
Revises: 0017
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_ACTIVE = "('RUNNING', 'STOPPING')"
_SCHEDULED = ["status", "queue", "scheduled_at"]
_LEASE = ["status", "lease_expires_at"]
_STARTED = ["status", "started_at", "queue"]


def upgrade() -> None:
    op.drop_index("ix_reliable_attempts_job", table_name="reliable_attempts")
    op.drop_table("reliable_attempts")
    op.drop_index("ix_reliable_jobs_status_started_queue", table_name="reliable_jobs")
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index("ix_reliable_jobs_status_queue_scheduled", table_name="reliable_jobs")
    op.create_index("ix_reliable_jobs_status_queue_scheduled", "reliable_jobs", _SCHEDULED, postgresql_where=sa.text(
        "status IN ('DEAD', 'PAUSED', 'PENDING', 'RETRY_WAIT', 'REVIEW', 'STOPPED')"))
    op.drop_index("ix_reliable_jobs_status_lease", table_name="reliable_jobs")
    op.create_index("ix_reliable_jobs_status_lease", "reliable_jobs", _LEASE,
                    postgresql_include=["started_at", "queue"], postgresql_where=sa.text(f"status IN {_ACTIVE}"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index("ix_reliable_jobs_status_lease", table_name="reliable_jobs")
        op.create_index("ix_reliable_jobs_status_lease", "reliable_jobs", _LEASE,
                        postgresql_where=sa.text(f"status IN {_ACTIVE}"))
        op.drop_index("ix_reliable_jobs_status_queue_scheduled", table_name="reliable_jobs")
        op.create_index("ix_reliable_jobs_status_queue_scheduled", "reliable_jobs", _SCHEDULED,
                        postgresql_where=sa.text("status IN ('DEAD', 'PAUSED', 'PENDING', 'RETRY_WAIT', 'REVIEW', "
                                                 "'RUNNING', 'STOPPED', 'STOPPING')"))
        op.create_index("ix_reliable_jobs_status_started_queue", "reliable_jobs", _STARTED,
                        postgresql_where=sa.text("status IN ('RUNNING')"))
    else:
        op.create_index("ix_reliable_jobs_status_started_queue", "reliable_jobs", _STARTED)
    op.create_table(
        "reliable_attempts",
        sa.Column("attempt_id", sa.String(64), primary_key=True),
        sa.Column("job_id", sa.String(255), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("lease_id", sa.BigInteger, nullable=False),
        sa.Column("worker_id", sa.String(255)),
        sa.Column("started_at", sa.Double, nullable=False),
        sa.Column("ended_at", sa.Double),
        sa.Column("outcome", sa.String(64)),
        sa.Column("error_class", sa.String(64)),
        sa.Column("error_type", sa.String(255)),
        sa.Column("error_message", sa.Text),
        sa.Column("checkpoint_version_start", sa.Integer),
    )
    op.create_index("ix_reliable_attempts_job", "reliable_attempts", ["job_id", "attempt"])
    # An attempt: the first event of its id entering an active state; its end: the first later event
    # of that id leaving one; its checkpoint: the saves (`checkpoint` events) before its claim.
    op.execute(f"""
        INSERT INTO reliable_attempts (attempt_id, job_id, attempt, lease_id, worker_id, started_at, ended_at,
            outcome, error_class, error_type, error_message, checkpoint_version_start)
        SELECT s.attempt_id, s.job_id, s.attempt, s.lease_id, s.worker_id, s.at, x.at, x.event, x.error_class,
            x.error_type, x.error_message,
            (SELECT count(*) FROM reliable_job_events c
             WHERE c.job_id = s.job_id AND c.event = 'checkpoint' AND c.id < s.id)
        FROM reliable_job_events s
        LEFT JOIN reliable_job_events x ON x.id = (
            SELECT min(y.id) FROM reliable_job_events y
            WHERE y.job_id = s.job_id AND y.attempt_id = s.attempt_id AND y.id > s.id
              AND y.from_status IN {_ACTIVE} AND y.to_status NOT IN {_ACTIVE})
        WHERE s.attempt_id IS NOT NULL AND s.to_status IN {_ACTIVE}
          AND (s.from_status IS NULL OR s.from_status NOT IN {_ACTIVE})
          AND NOT EXISTS (SELECT 1 FROM reliable_job_events p
                          WHERE p.job_id = s.job_id AND p.attempt_id = s.attempt_id AND p.id < s.id
                            AND p.to_status IN {_ACTIVE} AND (p.from_status IS NULL OR p.from_status NOT IN {_ACTIVE}))
    """)
