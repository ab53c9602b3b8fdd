"""`reliable init` and the shipped operational files (reliable.defaults)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from reliable import defaults
from reliable.alerts import load_rules
from reliable.cli.main import cli
from reliable.errors import ConfigError


def test_every_shipped_folder_is_on_disk_and_not_empty() -> None:
    for name in defaults.SHIPPED:
        assert any(defaults.path(name).iterdir()), name
    with pytest.raises(ConfigError, match="ships no 'nope'"):
        defaults.path("nope")


def test_init_copies_everything_then_keeps_what_exists(tmp_path: Path) -> None:
    runner = CliRunner()
    first = runner.invoke(cli, ["init", str(tmp_path), "--json"])
    assert first.exit_code == 0, first.output
    written = json.loads(first.output)["written"]
    shipped = sorted(p.relative_to(defaults.path()) for name in defaults.SHIPPED
                     for p in defaults.path(name).rglob("*") if p.is_file())
    assert sorted(Path(p).relative_to(tmp_path) for p in written) == shipped
    edited = tmp_path / "policies" / "default.yaml"
    edited.write_text("defaults:\n  max_attempts: 2\n")
    again = runner.invoke(cli, ["init", str(tmp_path)])
    assert again.exit_code == 0 and f"kept  {edited}" in again.output
    assert edited.read_text() == "defaults:\n  max_attempts: 2\n"  # an edited copy is never replaced silently
    forced = runner.invoke(cli, ["init", str(tmp_path), "--only", "policies", "--force", "--json"])
    assert str(edited) in json.loads(forced.output)["written"]
    assert edited.read_bytes() == (defaults.path("policies") / "default.yaml").read_bytes()


def test_init_only_one_folder_and_an_unknown_one(tmp_path: Path) -> None:
    runner = CliRunner()
    done = runner.invoke(cli, ["init", str(tmp_path), "--only", "grafana"])
    assert done.exit_code == 0
    assert [p.name for p in tmp_path.iterdir()] == ["grafana"]
    bad = runner.invoke(cli, ["init", str(tmp_path), "--only", "nope"])
    assert bad.exit_code == 2 and "'nope' is not one of" in bad.output


def test_alert_commands_default_to_the_shipped_rules_whatever_the_cwd(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no alert_rules/ or runbooks/ here
    monkeypatch.delenv("RELIABLE_ALERT_RULES", raising=False)
    done = CliRunner().invoke(cli, ["alerts", "export-prometheus"])
    assert done.exit_code == 0, done.output
    promql = [r for r in load_rules(defaults.path("alert_rules")) if r.kind == "promql"]
    assert done.output.count("- alert: ") == len(promql)
    check = CliRunner().invoke(cli, ["alerts", "check", str(defaults.path("alert_rules"))])
    assert check.exit_code == 0 and check.output.startswith("OK:"), check.output
