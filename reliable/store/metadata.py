"""The store's MetaData, the prefix of its tables, and what migrations and applications ask of them."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import BigInteger, Index, Integer, MetaData, Table

__all__ = ["TABLE_PREFIX", "alembic_include_name", "metadata", "on_dialect"]

#: Every table reliable owns (its Alembic version table too) starts with it.
TABLE_PREFIX = "reliable_"

metadata = MetaData()

# SQLite only auto-increments an INTEGER PRIMARY KEY.
_BigId = BigInteger().with_variant(Integer(), "sqlite")


def on_dialect(item: object, dialect: str) -> bool:
    """Whether the migrations create this table or index on `dialect` (an index declared for one
    dialect only says so in its info: `only_on`). For comparing a migrated database with `metadata`."""
    only_on = item.info.get("only_on") if isinstance(item, (Table, Index)) else None
    return only_on is None or only_on == dialect


def alembic_include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """For an application's own Alembic ``env.py``: ``context.configure(..., include_name=alembic_include_name)``
    leaves reliable's tables out of autogenerate (``reliable db upgrade`` migrates them)."""
    return not (type_ == "table" and name is not None and name.startswith(TABLE_PREFIX))
