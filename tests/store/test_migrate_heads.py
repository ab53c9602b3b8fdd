"""The revision checks every producer and worker makes read the scripts and the version table
themselves (no Alembic import at `install()`): they must agree with Alembic's own answers."""

from __future__ import annotations

from pathlib import Path

from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

from reliable.store import migrate


def test_the_head_read_from_the_scripts_is_alembics() -> None:
    scripts = ScriptDirectory.from_config(migrate._config())
    assert migrate.head_revision() == scripts.get_current_head()


def test_the_current_revision_read_from_the_table_is_alembics(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    assert migrate.current_revision(engine) is None  # never migrated: no version table
    for revision in ("0003", migrate.head_revision()):
        migrate.upgrade(engine, revision)
        with engine.connect() as conn:
            alembics = MigrationContext.configure(conn, opts={"version_table": migrate.VERSION_TABLE})
            assert migrate.current_revision(engine) == alembics.get_current_revision() == revision
    engine.dispose()


def test_installing_reliable_does_not_import_alembic(tmp_path: Path) -> None:
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'store.db'}"
    migrate.upgrade(create_engine(url))
    code = ("import sys, reliable; from dramatiq.brokers.stub import StubBroker; "
            f"reliable.install(StubBroker(), store={url!r}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
