"""The exported default PromQL rules pass the real `promtool check rules` and the shipped unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from reliable.alerts import export_yaml, load_rules
from reliable.cli.main import cli

from support import require_service

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository
BASE = "https://runbooks.example/reliable/"


def _promtool() -> str:
    path = shutil.which("promtool")
    require_service("promtool (Debian package `prometheus`)", path is not None)
    assert path is not None
    return path


@pytest.fixture
def exported(tmp_path: Path) -> Path:
    out = tmp_path / "reliable_rules.yml"
    result = CliRunner().invoke(cli, ["alerts", "export-prometheus", "--rules", str(SHIPPED / "alert_rules"),
                                      "--out", str(out), "--runbook-base-url", BASE])
    assert result.exit_code == 0, result.output
    return out


def test_export_shape(exported: Path) -> None:
    doc = yaml.safe_load(exported.read_text())
    (group,) = doc["groups"]
    assert set(group) == {"name", "rules"}  # promtool 2.42 rejects group labels and query_offset
    names = [r["alert"] for r in group["rules"]]
    assert names == [r.name for r in load_rules(SHIPPED / "alert_rules") if r.kind == "promql"]
    first = group["rules"][0]
    assert first["labels"] == {"owner": "platform", "route": "page", "severity": "critical"}
    # The alert's labels are appended by Prometheus (the promtool tests check the filled-in links).
    assert first["annotations"]["runbook_url"].startswith(BASE + "reliableheartbeatfailures{{ $sep := \"?\" }}")
    assert "{{ with $labels.actor }}{{ $sep }}actor={{ . | urlquery }}" in first["annotations"]["runbook_url"]
    assert first["for"] == "5m"


def test_promtool_check_rules(exported: Path) -> None:
    promtool = _promtool()
    done = subprocess.run([promtool, "check", "rules", "--lint=duplicate-rules", str(exported)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    count = sum(r.kind == "promql" for r in load_rules(SHIPPED / "alert_rules"))
    assert f"SUCCESS: {count} rules found" in done.stdout


def test_promtool_test_rules(exported: Path) -> None:
    promtool = _promtool()
    tests = sorted((ROOT / "tests" / "promtool").glob("*.yml"))
    assert tests
    for test in tests:
        shutil.copy(test, exported.parent / test.name)
    done = subprocess.run([promtool, "test", "rules", *[str(exported.parent / t.name) for t in tests]],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_promtool_rejects_a_bad_expression(tmp_path: Path) -> None:
    promtool = _promtool()
    (tmp_path / "bad.yaml").write_text("rules:\n  - name: Bad\n    kind: promql\n"
                                       "    condition: {expr: 'sum(rate(x[5m]) >'}\n"
                                       "    severity: info\n    owner: t\n    route: ticket\n")
    out = tmp_path / "out.yml"
    out.write_text(export_yaml(load_rules(tmp_path / "bad.yaml")))
    done = subprocess.run([promtool, "check", "rules", str(out)], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
