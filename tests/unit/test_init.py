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
    shipped = sorted(Path(name) / p.relative_to(defaults.path(name)) for name in defaults.SHIPPED
                     for p in defaults.path(name).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert sorted(Path(p).relative_to(tmp_path) for p in written) == shipped
    edited = tmp_path / "policies" / "app.yaml"
    edited.write_text("defaults:\n  max_attempts: 2\n")
    again = runner.invoke(cli, ["init", str(tmp_path)])
    assert again.exit_code == 0 and f"kept  {edited}" in again.output
    assert edited.read_text() == "defaults:\n  max_attempts: 2\n"  # an edited copy is never replaced silently
    forced = runner.invoke(cli, ["init", str(tmp_path), "--only", "policies", "--force", "--json"])
    assert str(edited) in json.loads(forced.output)["written"]
    assert edited.read_bytes() == (defaults.path("policies") / "app.yaml").read_bytes()


def test_the_defaults_are_found_at_the_top_of_a_checkout() -> None:
    """policies/, alert_rules/, runbooks/ and docs/ are one copy at the top of the repository (the wheel
    build puts them in the package); a checkout finds them there."""
    root = Path(__file__).resolve().parents[2]
    for name in ("policies", "alert_rules", "runbooks", "docs"):
        assert defaults.path(name) == root / name
        assert not (root / "reliable" / "defaults" / name).exists(), f"a second copy of {name}/ in the tree"


SHOP = """\
version: 1
rules:
  - name: shop-unavailable
    status: 503
    class: invalid_input
"""


def test_init_never_loads_the_built_ins_twice_nor_shadows_a_users_rule(tmp_path: Path) -> None:
    """Issue 29: `reliable init` wrote policies/default.yaml, which loaded as a user file before
    policies/shop.yaml (a 503 rule there was refused as unreachable behind http-5xx) and made
    `policy explain` list every built-in rule twice."""
    runner = CliRunner()
    assert runner.invoke(cli, ["init", str(tmp_path)]).exit_code == 0
    policies = tmp_path / "policies"
    (policies / "shop.yaml").write_text(SHOP)
    check = runner.invoke(cli, ["policy", "check", str(policies)])
    assert check.exit_code == 0, check.output
    assert check.output.startswith("OK: 1 user rules + 12 built-in rules"), check.output
    explained = runner.invoke(cli, ["policy", "explain", str(policies), "--exception", "httpx.HTTPStatusError",
                                    "--status", "503", "--json"])
    assert explained.exit_code == 0, explained.output
    answer = json.loads(explained.output)
    assert answer["policy"] == ["<built-in>", str(policies / "app.yaml"), str(policies / "shop.yaml")]
    text = explained.output
    assert "shop-unavailable" in text and text.count("(http-5xx)") <= 1, text
    from reliable.policy import Policy

    loaded = Policy.load(policies)
    names = [rule.name for rule in loaded.rules_for("anything", "default")]
    assert names.count("http-5xx") == 1 and names[0] == "shop-unavailable", names


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
