"""Alert templates render for every grouping; `alerts check` renders them and fails on a template error.

A user's grouped store rule without its own summary reached Alertmanager with the summary
"(template error: UndefinedError: 'dict object' has no attribute 'job_id')", and `alerts check`
said OK: the default summary named a label only per-job alerts carry.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from reliable.alerts import RunbookRenderer, parse_rules
from reliable.alerts.conditions import STORE_TYPES
from reliable.alerts.samples import sample_alerts, sample_job
from reliable.cli.main import cli
from reliable.errors import PolicyError

RUNBOOKS = Path(__file__).resolve().parents[2] / "reliable" / "defaults" / "runbooks"
#: A value for each condition key a store rule type requires.
VALUES = {"older_than": "1h", "window": "1h", "threshold": "0.5", "min_count": "2", "slo": "0.99", "late_by": "5m"}
#: Every store rule type, the error-budget rule once per grouping.
CONDITIONS = [f"{{type: {kind}, {', '.join(f'{key}: {VALUES[key]}' for key in sorted(required))}}}"
              for kind, (required, _optional) in sorted(STORE_TYPES.items())]
CONDITIONS += ["{type: error_budget_burn, slo: 0.99, group_by: queue}"]


def _rule(condition: str, annotations: str = "") -> str:
    return (f"rules:\n  - name: Mine\n    kind: store\n    condition: {condition}\n    severity: warning\n"
            f"    owner: team-data\n    route: notify\n{annotations}")


@pytest.mark.parametrize("condition", CONDITIONS)
def test_a_rule_without_its_own_annotations_renders_for_every_grouping(condition: str) -> None:
    (rule,) = parse_rules(_rule(condition), "mine.yaml")
    renderer = RunbookRenderer(RUNBOOKS)
    renderer.check(rule)
    alerts = sample_alerts(rule)
    assert alerts, "the samples raise no alert of this rule"
    for candidate in alerts:
        for jobs in ([sample_job(candidate)], []):
            annotations = renderer.annotations(candidate, jobs)
            assert "template error" not in annotations["summary"] + annotations["description"], annotations
            assert annotations["summary"].startswith("Mine")


def test_the_default_summary_names_what_each_grouping_has() -> None:
    renderer = RunbookRenderer(RUNBOOKS)
    (burn,) = parse_rules(_rule("{type: error_budget_burn, slo: 0.99, group_by: actor}"), "mine.yaml")
    (stuck,) = parse_rules(_rule("{type: stuck, older_than: 1h}"), "mine.yaml")
    summaries = {renderer.annotations(c, [])["summary"] for rule in (burn, stuck) for c in sample_alerts(rule)}
    assert "Mine (actor sample_actor)" in summaries
    assert "Mine on queue sample-queue (actor sample_actor): job sample-job-1 in RUNNING" in summaries


@pytest.mark.parametrize(("condition", "summary", "shape"), [
    ("{type: dead_letters, window: 1h}", "Job {{ labels.job_id }} is dead", "labels actor, alertname, owner, queue"),
    ("{type: error_budget_burn, slo: 0.99, group_by: queue}", "{{ labels.actor }} burns its budget",
     "labels alertname, owner, queue, route, severity"),
    ("{type: stuck, older_than: 1h}", "{{ jobs[0].job_id }} is stuck", "no affected job"),
])
def test_alerts_check_fails_on_a_template_error_naming_file_line_and_rule(tmp_path: Path, condition: str,
                                                                          summary: str, shape: str) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(_rule(condition, f"    annotations:\n      summary: \"{summary}\"\n"))
    (rule,) = parse_rules(path.read_text(), str(path))
    with pytest.raises(PolicyError) as info:
        RunbookRenderer(RUNBOOKS).check(rule)
    message = str(info.value)
    assert message.startswith(f"{path}:2: rule 'Mine': annotations.summary fails to render"), message
    assert shape in message and "UndefinedError" in message and info.value.field == "annotations.summary"
    result = CliRunner().invoke(cli, ["alerts", "check", str(path)])
    assert result.exit_code == 2 and f"{path}:2: rule 'Mine': annotations.summary" in result.output


def test_a_runbook_failing_for_a_grouping_is_reported(tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "mine.md.j2").write_text("# {{ labels.job_id }}\n")
    (rule,) = parse_rules(_rule("{type: queue_age, older_than: 1h}", "    runbook: mine.md.j2\n"), "mine.yaml")
    with pytest.raises(PolicyError, match=r"^mine.yaml:2: rule 'Mine': runbook fails to render .*job_id"):
        RunbookRenderer(runbooks).check(rule)
