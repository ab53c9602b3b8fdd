"""The demo's alert: store rules evaluated over the demo store, the runbook rendered in the sandbox.

With an Alertmanager URL the firing alerts are also delivered (Alertmanager API v2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import httpx

from reliable import defaults
from reliable.alerts import AlertEngine, AlertmanagerClient, AlertState, Evaluation, RunbookRenderer, load_rules
from reliable.store import StateStore

from .config import DemoSettings

__all__ = ["AlertRound", "evaluate_alerts", "runbooks_dir"]

def runbooks_dir(settings: DemoSettings) -> Path:
    """The runbooks shipped with reliable (the same templates `reliable alerts` renders)."""
    return defaults.path("runbooks")


@dataclass(frozen=True)
class AlertRound:
    """What one evaluation found and, with an Alertmanager, what was delivered."""

    firing: list[AlertState]
    runbooks: Path
    sent: int = 0
    errors: dict[str, str] = field(default_factory=dict)
    #: alertname -> the runbook of its first firing alert, rendered with the affected jobs.
    rendered: dict[str, str] = field(default_factory=dict)


def _rendered(engine: AlertEngine, evaluation: Evaluation) -> dict[str, str]:
    firing = {s.fingerprint for s in evaluation.firing}
    out: dict[str, str] = {}
    for candidate in evaluation.candidates:
        if candidate.fingerprint in firing and candidate.rule.name not in out:
            out[candidate.rule.name] = engine.runbook(candidate) or ""
    return out


def evaluate_alerts(store: StateStore, settings: DemoSettings) -> AlertRound:
    """Evaluate the demo's store rules once (state kept in reliable_alerts) and deliver if asked."""
    directory = runbooks_dir(settings)
    renderer = RunbookRenderer(directory)
    rules = load_rules(settings.rules_path)
    for rule in rules:
        renderer.check(rule)
    if settings.alertmanager is None:
        engine = AlertEngine(store, rules, renderer)
        evaluation = engine.evaluate()
        return AlertRound(evaluation.firing, directory, rendered=_rendered(engine, evaluation))
    with httpx.Client(timeout=5.0) as http:
        engine = AlertEngine(store, rules, renderer, client=AlertmanagerClient([settings.alertmanager], http))
        evaluation = engine.evaluate()
        report = engine.deliver()
    return AlertRound(evaluation.firing, directory, report.sent, dict(report.errors), _rendered(engine, evaluation))
