"""Checking the schema revision (as every worker does at start) logs nothing from Alembic; migrating logs its steps."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reliable.store import migrate

# A fresh interpreter (Alembic logs its plugin set-up when first imported), at INFO as a Dramatiq worker logs.
SCRIPT = """
import logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(name)s: %(message)s")
from reliable.store import StateStore
StateStore(sys.argv[1]).check_schema()
print("--- upgrade")
StateStore(sys.argv[2]).upgrade()
"""


def test_revision_check_is_silent_and_upgrade_logs_each_step(store_url: str, tmp_path: Path) -> None:
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    out = subprocess.run([sys.executable, "-c", SCRIPT, store_url, fresh], capture_output=True, text=True,
                         check=True).stdout
    check, upgrade = out.split("--- upgrade\n")
    assert [line for line in check.splitlines() if line.startswith("alembic")] == []
    alembic_lines = [line for line in upgrade.splitlines() if line.startswith("alembic")]
    steps = migrate.applied_between(None, migrate.head_revision())
    assert alembic_lines == [f"alembic.runtime.migration: Running upgrade {before} -> {revision}, {text}"
                             for before, (revision, text) in zip(["", *(r for r, _ in steps)], steps, strict=False)]
