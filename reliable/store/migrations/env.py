"""Alembic environment: runs on the connection reliable hands it (see reliable.store.migrate)."""

from __future__ import annotations

from alembic import context

from reliable.store.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # pragma: no cover - reliable always passes a connection
    raise RuntimeError("run migrations through `reliable db upgrade`, not the alembic command")

context.configure(
    connection=connection,
    target_metadata=metadata,
    version_table="reliable_alembic_version",
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
