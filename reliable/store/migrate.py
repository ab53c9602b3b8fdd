"""Schema migrations (Alembic), run on an engine reliable owns: upgrade, current and head revisions.

Alembic is imported only here and only when an upgrade runs: the revision checks every producer
and worker makes read the version table and the scripts' files themselves. Its INFO lines about its own set-up
(plugins loaded, "Context impl ...", "Will assume ... DDL") are dropped: every worker checks the
revision when it starts, and those lines told an operator nothing. "Running upgrade a -> b" stays.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from .db import read_connection, write_transaction

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


_REVISION_LINE = re.compile(r"""^(down_revision|revision)\s*=\s*["']?(\w+|None)["']?""", re.M)


@functools.cache
def head_revision() -> str:
    """The newest schema revision this version of reliable knows: the one revision of the scripts no
    other names as its `down_revision` (read from the files: no Alembic import, which costs every
    producer's `install()` and worker boot about 0.4 s; tests/store/test_migrate_heads.py checks
    Alembic agrees)."""
    revisions: set[str] = set()
    downs: set[str] = set()
    for script in (_SCRIPTS / "versions").glob("*.py"):
        fields = dict((name, value) for name, value in _REVISION_LINE.findall(script.read_text(encoding="utf-8")))
        if "revision" in fields:
            revisions.add(fields["revision"])
            downs.add(fields.get("down_revision", "None"))
    heads = revisions - downs
    if len(heads) != 1:
        raise RuntimeError(f"reliable's migrations have {len(heads)} heads ({sorted(heads)}): the chain is broken")
    return heads.pop()


def applied_between(before: str | None, after: str) -> list[tuple[str, str]]:
    """(revision, description) of each migration from `before` (None: an empty database) to `after`, in order."""
    if before == after:
        return []
    with _quiet_setup():
        from alembic.script import ScriptDirectory

        steps = ScriptDirectory.from_config(_config()).iterate_revisions(after, before or "base")
    return [(step.revision, (step.doc or "").strip()) for step in reversed(list(steps))]


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it was never migrated (one query on the
    version table Alembic keeps; Alembic itself is not imported)."""
    with read_connection(engine) as conn:
        if not inspect(conn).has_table(VERSION_TABLE):
            return None
        found = conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all()
    if len(found) > 1:
        raise RuntimeError(f"{VERSION_TABLE} holds {len(found)} revisions ({sorted(found)}): reliable's schema has one")
    return str(found[0]) if found else None


def upgrade(engine: Engine, revision: str = "head") -> tuple[str | None, str]:
    """Migrate the database to `revision`; return (before, after). Running it twice is a no-op."""
    with _quiet_setup():
        from alembic import command

    before = current_revision(engine)
    config = _config()
    with _quiet_setup(), write_transaction(engine) as conn:
        if engine.dialect.name == "postgresql":  # one transaction: through a pooler too
            conn.exec_driver_sql("SET LOCAL statement_timeout = 0")  # an index build may take minutes
        config.attributes["connection"] = conn
        command.upgrade(config, revision)
    return before, current_revision(engine) or ""
