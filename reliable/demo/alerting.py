"""The demo's alert: store rules evaluated over the demo store, the runbook rendered in the sandbox.

With an Alertmanager URL the firing alerts are also delivered (Alertmanager API v2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx

import reliable
from reliable.alerts import AlertEngine, AlertmanagerClient, AlertState, RunbookRenderer, load_rules
from reliable.store import StateStore

from .config import DemoSettings

__all__ = ["AlertRound", "evaluate_alerts", "runbooks_dir"]

RUNBOOKS = ("dead_letter_growth.md.j2", "review_queue_age.md.j2")

_FALLBACK_LAYOUT = """\
# {{ alert.name }} ({{ alert.severity }}, route {{ alert.route }}, owner {{ alert.owner }})

{{ summary }}

{% for j in jobs %}
- Job `{{ j.job_id }}`: {{ j.status }}, queue `{{ j.queue }}`, actor `{{ j.actor }}`, attempt {{ j.attempt }}
  - Last error class: {{ j.last_error_class or "none" }}
  - Safe next action: `{{ j.actions[-1] }}` (inspect first: `{{ j.actions[0] }}`)
{% endfor %}

Runbook: {{ runbook_url }}
"""


def runbooks_dir(settings: DemoSettings) -> Path:
    """The project's runbooks/ (a source checkout), else minimal ones written into the working directory."""
    shipped = Path(reliable.__file__).resolve().parent.parent / "runbooks"
    if all((shipped / name).is_file() for name in RUNBOOKS):
        return shipped
    fallback = settings.workdir / "runbooks"
    fallback.mkdir(parents=True, exist_ok=True)
    for name in RUNBOOKS:
        (fallback / name).write_text(_FALLBACK_LAYOUT, encoding="utf-8")
    return fallback


@dataclass(frozen=True)
class AlertRound:
    """What one evaluation found and, with an Alertmanager, what was delivered."""

    firing: list[AlertState]
    runbooks: Path
    sent: int = 0
    errors: dict[str, str] = field(default_factory=dict)


def evaluate_alerts(store: StateStore, settings: DemoSettings) -> AlertRound:
    """Evaluate the demo's store rules once (state kept in reliable_alerts) and deliver if asked."""
    directory = runbooks_dir(settings)
    renderer = RunbookRenderer(directory)
    rules = load_rules(settings.rules_path)
    for rule in rules:
        renderer.check(rule)
    if settings.alertmanager is None:
        evaluation = AlertEngine(store, rules, renderer).evaluate()
        return AlertRound(evaluation.firing, directory)
    with httpx.Client(timeout=5.0) as http:
        engine = AlertEngine(store, rules, renderer, client=AlertmanagerClient([settings.alertmanager], http))
        evaluation = engine.evaluate()
        report = engine.deliver()
    return AlertRound(evaluation.firing, directory, report.sent, dict(report.errors))
