"""Create a PostgreSQL database when it does not exist yet (the demo's README command names a new one)."""

from __future__ import annotations

from sqlalchemy import create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from .db import check_store_url

__all__ = ["ensure_database"]


def ensure_database(url: str) -> str | None:
    """Create the PostgreSQL database `url` names if it is missing; a sentence saying so, else None.

    Anything else (SQLite, no right to create, server down) is left to the store, whose error says
    what is wrong; a wrong URL raises ConfigError (password masked).
    """
    parsed = check_store_url(url)
    name = parsed.database
    if not parsed.get_backend_name().startswith("postgresql") or not name or name == "postgres":
        return None
    engine = create_engine(parsed.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            if conn.execute(text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": name}).first():
                return None
            conn.execute(text(f"CREATE DATABASE {conn.dialect.identifier_preparer.quote(name)}"))
    except SQLAlchemyError:
        return None
    finally:
        engine.dispose()
    return f"created the PostgreSQL database {name!r} (it did not exist)"
