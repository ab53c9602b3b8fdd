"""reliable_worker_processes.host_instance: cloned hosts cannot pass as one.

Virtual machines restored from one memory snapshot share the host name and the kernel's boot id,
the only evidence the early release of a dead process's leases used: a worker of one clone took a
pid gone on its own machine for a death on the other. Each process now also records the host's
random id of its boot (reliable.worker.host_instance); a worker only judges the records of its own
host name, boot, pid namespace and instance id. Records written before this migration have none:
their leases expire by their TTL.

Revision ID: 0022
Revises: 0021
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("reliable_worker_processes", sa.Column("host_instance", sa.String(64)))


def downgrade() -> None:
    with op.batch_alter_table("reliable_worker_processes") as batch:
        batch.drop_column("host_instance")
