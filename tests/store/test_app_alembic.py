"""An application that keeps its own Alembic migrations in the same database as reliable's tables."""

from __future__ import annotations

from pathlib import Path

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Integer, MetaData, String, Table, create_engine

from reliable.store import StateStore
from reliable.store.migrate import VERSION_TABLE
from reliable.store.schema import TABLE_PREFIX, alembic_include_name, metadata


def test_autogenerate_with_the_hook_sees_only_the_apps_tables(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    StateStore(url).upgrade()
    app = MetaData()
    Table("orders", app, Column("id", Integer, primary_key=True), Column("sku", String(20)))
    engine = create_engine(url)
    with engine.connect() as conn:
        plain = compare_metadata(MigrationContext.configure(conn), app)
        hooked = compare_metadata(MigrationContext.configure(conn, opts={"include_name": alembic_include_name}), app)
    engine.dispose()
    dropped = {diff[1].name for diff in plain if diff[0] == "remove_table"}
    assert {t.name for t in metadata.sorted_tables} <= dropped, "without the hook, autogenerate drops reliable's tables"
    assert VERSION_TABLE.startswith(TABLE_PREFIX)
    assert [(diff[0], diff[1].name) for diff in hooked] == [("add_table", "orders")]


def test_every_table_reliable_owns_has_the_prefix() -> None:
    assert all(table.name.startswith(TABLE_PREFIX) for table in metadata.sorted_tables)
