"""Schema migrations (Alembic), run on an engine reliable owns: upgrade, current and head revisions.

Alembic is imported only here and only when a function runs. Its INFO lines about its own set-up
(plugins loaded, "Context impl ...", "Will assume ... DDL") are dropped: every worker checks the
revision when it starts, and those lines told an operator nothing. "Running upgrade a -> b" stays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from .db import translate_errors, write_transaction

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = ["VERSION_TABLE", "applied_between", "current_revision", "head_revision", "upgrade"]

VERSION_TABLE = "reliable_alembic_version"
_SCRIPTS = Path(__file__).parent / "migrations"
_SETUP_MESSAGES = ("Context impl", "Will assume")


class _AlembicSetupLines(logging.Filter):
    """Lets through Alembic's warnings and migration steps, not its INFO lines about its own set-up."""

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a set-up line (every record of the plugins logger, and the two context lines)."""
        if record.levelno > logging.INFO:
            return True
        return record.name != "alembic.runtime.plugins" and not str(record.msg).startswith(_SETUP_MESSAGES)


@contextmanager
def _quiet_setup() -> Iterator[None]:
    """Drop Alembic's set-up lines while reliable uses it (its first import logs one per plugin); an
    application's own Alembic runs, before or after, keep theirs."""
    quiet = _AlembicSetupLines()
    loggers = [logging.getLogger(name) for name in ("alembic.runtime.plugins", "alembic.runtime.migration")]
    for logger in loggers:
        logger.addFilter(quiet)
    try:
        yield
    finally:
        for logger in loggers:
            logger.removeFilter(quiet)


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


def head_revision() -> str:
    """The newest schema revision this version of reliable knows."""
    with _quiet_setup():
        from alembic.script import ScriptDirectory

        head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head is not None
    return head


def applied_between(before: str | None, after: str) -> list[tuple[str, str]]:
    """(revision, description) of each migration from `before` (None: an empty database) to `after`, in order."""
    if before == after:
        return []
    with _quiet_setup():
        from alembic.script import ScriptDirectory

        steps = ScriptDirectory.from_config(_config()).iterate_revisions(after, before or "base")
    return [(step.revision, (step.doc or "").strip()) for step in reversed(list(steps))]


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it was never migrated."""
    with _quiet_setup():
        from alembic.runtime.migration import MigrationContext

    with _quiet_setup(), translate_errors(engine), engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return context.get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Migrate the database to `revision`; return (before, after). Running it twice is a no-op."""
    with _quiet_setup():
        from alembic import command

    before = current_revision(engine)
    config = _config()
    with _quiet_setup(), write_transaction(engine) as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    return before, current_revision(engine) or ""
