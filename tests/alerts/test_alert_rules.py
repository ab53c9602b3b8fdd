"""Rule files: the shipped defaults load, and mistakes give one clear error naming file:line and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reliable.alerts import load_rules, parse_rules
from reliable.alerts.conditions import StoreCondition
from reliable.errors import PolicyError

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository

GOOD = """\
rules:
  - name: JobStuck
    kind: store
    condition: {type: stuck, older_than: 1h}
    for: 1m
    severity: warning
    owner: from_job
    route: notify
"""


def _rule(**overrides: str) -> str:
    fields = {"name": "JobStuck", "kind": "store", "condition": "{type: stuck, older_than: 1h}", "for": "1m",
              "severity": "warning", "owner": "from_job", "route": "notify"}
    fields.update(overrides)
    lines = ["rules:", "  - name: " + fields.pop("name")]
    lines += [f"    {key}: {value}" for key, value in fields.items() if value != "<absent>"]
    return "\n".join(lines) + "\n"


def test_defaults_load() -> None:
    rules = load_rules(SHIPPED / "alert_rules")
    names = {r.name for r in rules}
    assert {"ReliableJobStuck", "ReliableErrorBudgetBurnFast", "ReliableHeartbeatFailures"} <= names
    assert all(r.runbook for r in rules)


def test_shipped_rules_follow_one_convention() -> None:
    """Reliable<CamelCase> for store and PromQL rules alike; a one-line summary and a description."""
    for rule in load_rules(SHIPPED / "alert_rules"):
        assert re.fullmatch(r"Reliable(?:[A-Z][a-z0-9]+)+", rule.name), rule.name
        assert set(rule.annotations) == {"summary", "description"}, rule.name
        assert "\n" not in rule.annotations["summary"], rule.name
        assert rule.annotations["description"].count(". ") <= 1, rule.name  # one or two sentences


def test_good_rule_fields() -> None:
    (rule,) = parse_rules(GOOD, "x.yaml")
    assert rule.for_seconds == 60 and rule.owner_from_job and rule.line == 2
    assert isinstance(rule.condition, StoreCondition)
    assert rule.condition.states == ("RUNNING", "STOPPING", "PAUSED") and rule.condition.older_than == 3600


MISTAKES = [
    # (yaml text, line, field, words in message)
    (_rule(name="job_stuck"), 2, "name", "CamelCase"),
    (_rule(kind="sql"), 3, "kind", "store, promql"),
    (_rule(severity="urgent"), 6, "severity", "critical, warning, info"),
    (_rule(route="email"), 8, "route", "page, notify, ticket"),
    (_rule(**{"for": "5 minutes"}), 5, "for", "duration"),
    (_rule(owner="<absent>"), 2, "owner", "missing required key"),
    (_rule(colour="red"), 9, "colour", "unknown key"),
    (_rule(condition="{type: stuck_forever, older_than: 1h}"), 4, "condition.type", "must be one of"),
    (_rule(condition="{type: stuck, older_than: 1h, window: 5m}"), 4, "condition.window", "unknown key"),
    (_rule(condition="{type: stuck}"), 4, "condition.older_than", "needs"),
    (_rule(condition="{type: stuck, states: [RUNNING, DONE], older_than: 1h}"), 4, "condition.states", "DONE"),
    (_rule(condition="{type: failure_rate, window: 5m, threshold: 2}"), 4, "condition.threshold", "between 0 and 1"),
    (_rule(condition="{type: error_budget_burn, slo: 0.99, windows: [{long: 5m, short: 1h, factor: 14.4}]}"), 4,
     "condition.windows", "shorter"),
    (_rule(labels="{severity: low}"), 9, "labels.severity", "cannot be overridden"),
    (_rule(labels="{team: [a, b]}"), 9, "labels.team", "must be a string"),
    (_rule(runbook="../../etc/passwd"), 9, "runbook", "no directories"),
    (_rule(kind="promql", condition="{expr: up == 0}"), 7, "owner", "from_job"),
    (_rule(kind="promql", condition="{query: up == 0}", owner="team"), 4, "condition.query", "unknown key"),
    ("rules:\n  - name: A\n    name: B\n", 3, "name", "duplicate key"),
    ("rules: [\n  {name: A\n", 3, None, "invalid YAML"),
    ("alerts: []\n", 1, "alerts", "unknown top-level key"),
]


@pytest.mark.parametrize(("text", "line", "field", "words"), MISTAKES)
def test_mistakes_name_file_line_field(text: str, line: int, field: str | None, words: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_rules(text, "rules/bad.yaml")
    error = caught.value
    message = str(error)
    assert message.startswith(f"rules/bad.yaml:{line}: "), message
    assert error.line == line and error.field == field, message
    assert words in message, message
    assert "\n" not in message


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text("# another file\n" + GOOD)
    expected = r"b\.yaml:3: duplicate rule name 'JobStuck' \(first defined at .*a\.yaml:2\)"
    with pytest.raises(PolicyError, match=expected):
        load_rules(tmp_path)
    problems: list[PolicyError] = []
    assert len(load_rules(tmp_path, collect=problems)) == 1 and len(problems) == 1


def test_collect_reports_each_bad_file(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(_rule(route="email"))
    (tmp_path / "b.yaml").write_text(_rule(name="Other", severity="nope"))
    (tmp_path / "c.yaml").write_text(_rule(name="Fine"))
    problems: list[PolicyError] = []
    rules = load_rules(tmp_path, collect=problems)
    assert [r.name for r in rules] == ["Fine"]
    assert [(Path(p.path or "").name, p.line) for p in problems] == [("a.yaml", 8), ("b.yaml", 6)]
