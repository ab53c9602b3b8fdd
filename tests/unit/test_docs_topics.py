"""`reliable docs` and the console's /docs: the documentation shipped in the package (issue 29, item 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from reliable.cli.main import cli
from reliable.defaults import topics
from reliable.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "reliable"
#: How the code and its messages point at a page: a docs/ path, or the command that prints it.
REFERENCE = re.compile(r"(?<![\w./])(docs/[A-Za-z0-9_-]+\.md(?:#[\w-]+)?|reliable docs [a-z][a-z0-9-]*)")


def references() -> dict[str, set[str]]:
    """Every page reference in reliable/ (code, docstrings, --help, messages, templates, shipped files)."""
    found: dict[str, set[str]] = {}
    for file in sorted(PACKAGE.rglob("*")):
        if not file.is_file() or "__pycache__" in file.parts or file.suffix not in (".py", ".html", ".yaml", ".j2"):
            continue
        for match in REFERENCE.finditer(file.read_text(encoding="utf-8")):
            ref = match.group(1).removeprefix("reliable docs ")
            found.setdefault(ref, set()).add(str(file.relative_to(ROOT)))
    return found


def test_every_docs_reference_in_the_package_names_a_topic() -> None:
    found = references()
    assert len(found) > 10, found  # the pattern still sees the references
    broken = {}
    for ref, where in found.items():
        try:
            topics.find(ref)
        except ConfigError:
            broken[ref] = sorted(where)
    assert not broken, f"references to no topic: {broken}"
    # ... and `reliable docs <the same reference>` prints that page.
    for ref in ("docs/rabbitmq.md#migrating-a-classic-queue", "postgresql-failover", "docs/worker.md"):
        done = CliRunner().invoke(cli, ["docs", ref])
        assert done.exit_code == 0 and done.output.startswith("# "), (ref, done.output[:200])


def test_the_user_facing_messages_name_the_command_not_a_repository_path() -> None:
    """--help, `reliable init` and error messages are read by pip users, who have no docs/ folder."""
    shown = [*(PACKAGE / "cli").glob("*.py"), PACKAGE / "store" / "replication.py", PACKAGE / "rabbitmq" / "broker.py"]
    for file in (f for f in shown if f.name != "docs.py"):  # `reliable docs` says it accepts that form too
        text = file.read_text(encoding="utf-8")
        assert not re.search(r"docs/[a-z-]+\.md", text), f"{file.relative_to(ROOT)} points at docs/X.md"
    init = CliRunner().invoke(cli, ["init", "--help"])
    assert "docs/" not in init.output


def test_reliable_docs_lists_the_topics_and_prints_one() -> None:
    runner = CliRunner()
    listed = runner.invoke(cli, ["docs"])
    assert listed.exit_code == 0, listed.output
    names = {p.stem for p in (ROOT / "docs").glob("*.md")}
    assert {line.split()[0] for line in listed.output.splitlines()[:len(names)]} == names
    assert "worker  " in listed.output or "worker " in listed.output
    as_json = json.loads(runner.invoke(cli, ["docs", "--json"]).output)
    assert {t["topic"] for t in as_json} == names
    page = runner.invoke(cli, ["docs", "policies"])
    assert page.exit_code == 0 and page.output == (ROOT / "docs" / "policies.md").read_text()
    where = runner.invoke(cli, ["docs", "policies", "--path"])
    assert where.output.strip() == str(ROOT / "docs" / "policies.md")
    unknown = runner.invoke(cli, ["docs", "nope"])
    assert unknown.exit_code == 2 and "no documentation topic 'nope'" in unknown.output and "worker" in unknown.output
    for bad in ("../README", "docs/../../README.md", ""):
        with pytest.raises(ConfigError):
            topics.find(bad)
