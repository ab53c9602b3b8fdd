"""The store's MetaData, the prefix of its tables, and what migrations and applications ask of them."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import BigInteger, Column, Double, Index, Integer, MetaData, String, Table, Text

__all__ = ["TABLE_PREFIX", "alembic_include_name", "audit_table", "metadata", "on_dialect"]

#: Every table reliable owns (its Alembic version table too) starts with it.
TABLE_PREFIX = "reliable_"

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY.
_BigId = BigInteger().with_variant(Integer(), "sqlite")


def audit_table(name: str, subject: str) -> Table:
    """An audit trail of the operators' commands on one kind of thing (a worker process, an actor's
    limit, a queue), keyed by its `subject` column: what happened (`event`), when (the database's
    clock), by whom, from where, why, and its detail as JSON. The one shape
    `reliable.store.audit_trail` writes and reads (`AuditEntry`)."""
    return Table(
        name,
        metadata,
        Column("id", _BigId, primary_key=True, autoincrement=True),
        Column(subject, String(255), nullable=False),
        Column("at", Double, nullable=False),
        Column("event", String(32), nullable=False),
        Column("operator", String(255)),
        Column("host", String(255)),
        Column("source", String(64)),
        Column("reason", Text),
        Column("detail", Text),  # JSON
    )


def on_dialect(item: object, dialect: str) -> bool:
    """Whether the migrations create this table or index on `dialect` (an index declared for one
    dialect only says so in its info: `only_on`). For comparing a migrated database with `metadata`."""
    only_on = item.info.get("only_on") if isinstance(item, (Table, Index)) else None
    return only_on is None or only_on == dialect


def alembic_include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """For an application's own Alembic ``env.py``: ``context.configure(..., include_name=alembic_include_name)``
    leaves reliable's tables out of autogenerate (``reliable db upgrade`` migrates them)."""
    return not (type_ == "table" and name is not None and name.startswith(TABLE_PREFIX))
