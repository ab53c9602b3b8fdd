"""docs/architecture.md embeds the part generated from docs/gen_architecture.py (the layer table,
the store's tables and migrations): they must match, and the lists must be the store's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

from reliable.store.schema import metadata

from support import docs_script

ROOT = Path(__file__).resolve().parents[2]


def _generator() -> ModuleType:
    return docs_script("gen_architecture")


def test_architecture_embeds_the_generated_part() -> None:
    gen = _generator()
    embedded = gen.embedded((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert embedded is not None, "docs/architecture.md has no generated part (markers missing)"
    assert embedded == gen.section(), "run `python docs/gen_architecture.py` and paste its output into architecture.md"


def test_the_generated_part_names_every_table_and_migration() -> None:
    section = _generator().section()
    assert all(f"`{name}`" in section for name in metadata.tables) and len(metadata.tables) >= 22
    revisions = sorted(p.stem for p in (ROOT / "reliable/store/migrations/versions").glob("[0-9]*.py"))
    assert revisions and all(f"`{name}`" in section for name in revisions)


def test_a_stale_page_is_refused() -> None:
    gen = _generator()
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    stale = page.replace("`0020_event_primary_key`", "")
    assert gen.embedded(stale) != gen.section()


def test_check_mode_passes() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "gen_architecture.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
