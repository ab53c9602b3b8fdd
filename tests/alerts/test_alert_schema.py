"""Migration 0002 creates exactly the `reliable_alerts` table the metadata describes (SQLite and PostgreSQL)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from reliable.store import StateStore
from reliable.store.migrate import VERSION_TABLE, head_revision
from reliable.store.schema import metadata, on_dialect


def test_migrated_database_matches_metadata(store: StateStore) -> None:
    assert "reliable_alerts" in metadata.tables
    assert head_revision() >= "0002"
    dialect = store.engine.dialect.name
    with store.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={
            "version_table": VERSION_TABLE, "compare_type": True, "compare_server_default": False,
            "include_object": lambda item, _name, _type, reflected, _other: reflected or on_dialect(item, dialect)})
        diffs = compare_metadata(context, metadata)
    assert diffs == [], diffs
    inspector = inspect(store.engine)
    indexes = {ix["name"] for ix in inspector.get_indexes("reliable_alerts")}
    assert {"ix_reliable_alerts_state_next_send", "ix_reliable_alerts_alertname"} <= indexes
    assert inspector.get_pk_constraint("reliable_alerts")["constrained_columns"] == ["fingerprint"]
