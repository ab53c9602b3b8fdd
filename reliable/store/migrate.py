"""Schema migrations (Alembic), run on an engine reliable owns: upgrade, current and head revisions."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

from .db import translate_errors, write_transaction

__all__ = ["VERSION_TABLE", "current_revision", "head_revision", "upgrade"]

VERSION_TABLE = "reliable_alembic_version"
_SCRIPTS = Path(__file__).parent / "migrations"


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


def head_revision() -> str:
    """The newest schema revision this version of reliable knows."""
    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    with translate_errors(engine), engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Migrate the database to `revision`; return (before, after). Running it twice is a no-op."""
    before = current_revision(engine)
    config = _config()
    with write_transaction(engine) as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    return before, current_revision(engine) or ""
