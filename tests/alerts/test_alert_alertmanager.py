"""End to end against a real Alertmanager (Debian package prometheus-alertmanager) and a real store.

A job stuck past its SLA fires an alert that Alertmanager lists with the right labels and a
runbook naming the job's attempts and last checkpoint; it resolves when the job finishes. With
Alertmanager stopped the alert stays queued in reliable_alerts and arrives after the restart.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from reliable.alerts import AlertEngine, AlertmanagerClient, DeliveryPolicy, load_rules, parse_rules
from reliable.alerts.persist import load_alerts
from reliable.alerts.runbooks import RunbookRenderer
from reliable.control import Control
from reliable.operators import Operator
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.store.schema import alerts as alerts_table

from monitoring import AM_BINARY, Alertmanager
from support import Clock, require_service, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

RULES = """\
rules:
  - name: JobStuckTest
    kind: store
    condition: {type: stuck, states: [RUNNING], older_than: 1s}
    for: 0s
    severity: critical
    owner: from_job
    route: page
    annotations:
      summary: "Job {{ labels.job_id }} stuck in {{ labels.state }}"
    runbook: job_stuck.md.j2
"""


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    require_service("Alertmanager (Debian package prometheus-alertmanager)", shutil.which(AM_BINARY) is not None)
    am = Alertmanager(tmp_path)  # the shipped example config
    am.start()
    yield am
    am.stop()


def _stuck_job(store: StateStore, job_id: str) -> tuple[int, str]:
    store.register(NewJob(job_id=job_id, queue="exports", actor="export", message={"args": [job_id]},
                          owner="team-data", trace_id=f"trace-{job_id}"))
    claim = store.claim(job_id, worker_id="worker-1", lease_ttl=600)
    store.save_checkpoint(job_id, claim.lease_id, {"page": 7}, lease_ttl=600)
    return claim.lease_id, claim.attempt_id


def test_stuck_job_alert_fires_resolves_and_survives_an_alertmanager_outage(
        store: StateStore, alertmanager: Alertmanager) -> None:
    rules = parse_rules(RULES, "test.yaml")
    renderer = RunbookRenderer(ROOT / "runbooks", base_url="https://runbooks.example/",
                               links={"logs": "https://logs.example/?q={job_id}"})
    policy = DeliveryPolicy(evaluation_interval=1, resend_interval=60, backoff_initial=0.2, backoff_max=0.3)
    clock = Clock(store.now())
    with httpx.Client(timeout=3) as http:
        engine = AlertEngine(store, rules, renderer, client=AlertmanagerClient([alertmanager.url], http),
                             policy=policy, clock=clock)

        # 1. a job stuck past its SLA fires, with labels and a runbook naming attempts and checkpoint
        lease_id, attempt_id = _stuck_job(store, "job-one")
        clock.now = store.now() + 1.2  # the job's times are database time: the engine sees it 1.2 s later
        evaluation, report = engine.run_once()
        assert len(evaluation.firing) == 1 and report.sent == 1, report
        (alert,) = wait_for(lambda: alertmanager.alerts("JobStuckTest"), "Alertmanager to list the alert")
        assert alert["labels"] == {"alertname": "JobStuckTest", "severity": "critical", "route": "page",
                                   "owner": "team-data", "queue": "exports", "actor": "export",
                                   "job_id": "job-one", "state": "RUNNING"}
        assert alert["status"]["state"] == "active"
        assert [r["name"] for r in alert["receivers"]] == ["team-data-page"]  # the owner's, by severity
        notes = alert["annotations"]
        assert set(notes) == {"summary", "description", "runbook_url"}  # the runbook is read at its URL
        assert notes["summary"] == "Job job-one stuck in RUNNING"
        assert re.fullmatch(r"JobStuckTest holds with value 1\.2\d* on queue exports for actor export "
                            r"\(owner team-data\)\.", notes["description"]), notes["description"]
        assert notes["runbook_url"] == "https://runbooks.example/jobstucktest?queue=exports&actor=export&job_id=job-one"
        runbook = engine.runbook(evaluation.candidates[0]) or ""
        assert f"`{attempt_id}`" in runbook
        assert "Last checkpoint: `{&#34;page&#34;:7}`" in runbook
        assert "https://logs.example/?q=job-one" in runbook
        assert "`reliable stop job-one --reason alert:JobStuckTest`" in runbook

        # 2. the job finishes: the resolution is sent with endsAt and Alertmanager resolves it
        store.finish("job-one", lease_id, Event.SUCCEED, worker_id="worker-1")
        evaluation, report = engine.run_once()
        assert report.sent == 1 and not evaluation.firing
        (row,) = load_alerts(store).values()
        assert row.state == "resolved" and row.ends_at is not None and row.last_sent_at is not None

        def resolved() -> bool:
            found = alertmanager.alerts("JobStuckTest")
            return not found or all(a["status"]["state"] != "active" for a in found)

        wait_for(resolved, "Alertmanager to resolve the alert")  # once its clock passes endsAt

        # 3. Alertmanager goes down; a second job gets stuck: the alert is kept in the store
        alertmanager.stop()
        _stuck_job(store, "job-two")
        clock.now = store.now() + 1.2
        evaluation, report = engine.run_once()
        assert report.failed >= 1 and report.sent == 0
        with store.engine.connect() as conn:
            rows = {r.fingerprint: r for r in conn.execute(select(alerts_table))}
        (queued,) = [r for r in rows.values() if json.loads(r.labels).get("job_id") == "job-two"]
        assert queued.state == "firing" and queued.last_sent_at is None and queued.send_attempts == 1
        assert queued.last_error and queued.next_send_at == pytest.approx(clock.now + 0.2)  # backoff_initial
        clock.now = queued.next_send_at - 0.01
        assert engine.deliver().failed == 0  # not due yet: backing off
        clock.now = queued.next_send_at
        assert engine.deliver().failed == 1  # retried after the backoff, still down, still kept
        (queued_state,) = [s for s in load_alerts(store).values() if s.labels.get("job_id") == "job-two"]
        assert queued_state.send_attempts == 2 and queued_state.state == "firing"
        assert queued_state.next_send_at == pytest.approx(clock.now + 0.3), "doubled to 0.4 s, capped at 0.3 s"

        # 4. Alertmanager is back on the same port: the next delivery gets the alert through
        alertmanager.start()
        assert queued_state.next_send_at is not None
        clock.now = queued_state.next_send_at
        report = engine.deliver()
        assert report.sent >= 1 and not report.errors, report
        (alert,) = wait_for(lambda: alertmanager.alerts("JobStuckTest"), "Alertmanager to list the second alert")
        assert alert["labels"]["job_id"] == "job-two" and alert["status"]["state"] == "active"
        assert "job-two" in alert["annotations"]["summary"]
        state = next(s for s in load_alerts(store).values() if s.labels.get("job_id") == "job-two")
        assert state.send_attempts == 0 and state.last_error is None and state.last_sent_at is not None


def _dead(store: StateStore, job_id: str, actor: str) -> None:
    store.register(NewJob(job_id=job_id, queue="mail", actor=actor, message={}, owner="team-mail"))
    claim = store.claim(job_id, worker_id="w", lease_ttl=60)
    store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w")


def test_dead_letter_alert_resolves_once_the_job_is_requeued_and_succeeds(
        store: StateStore, alertmanager: Alertmanager) -> None:
    """The shipped ReliableDeadLetterGrowth counts jobs that went DEAD in its 30-min window AND are
    still DEAD: a requeued job that succeeded resolves it at the next evaluation, inside the window."""
    rules = [r for r in load_rules(ROOT / "alert_rules") if r.name == "ReliableDeadLetterGrowth"]
    clock = Clock(store.now())
    with httpx.Client(timeout=3) as http:
        engine = AlertEngine(store, rules, RunbookRenderer(ROOT / "runbooks"), clock=clock,
                             client=AlertmanagerClient([alertmanager.url], http),
                             policy=DeliveryPolicy(evaluation_interval=1))
        _dead(store, "dead-1", "send")
        _dead(store, "dead-2", "other")  # stays DEAD: its alert must keep firing
        clock.now = store.now()
        evaluation, report = engine.run_once()
        assert sorted(s.labels["actor"] for s in evaluation.firing) == ["other", "send"] and report.sent == 2
        alerts = wait_for(lambda: len(alertmanager.alerts("ReliableDeadLetterGrowth")) == 2 and
                          alertmanager.alerts("ReliableDeadLetterGrowth"), "Alertmanager to list both")
        send = next(a for a in alerts if a["labels"]["actor"] == "send")
        assert send["status"]["state"] == "active"
        assert send["annotations"]["runbook_url"] == "http://127.0.0.1:9464/runbooks/reliabledeadlettergrowth?queue=mail&actor=send"
        assert send["annotations"]["description"].startswith("1 job(s) of send on queue mail went to DEAD")

        # requeued, claimed and SUCCEEDED: well inside the 30-min window
        Control(store, identity=Operator("alice", "box", "test")).requeue(
            "dead-1", reason="endpoint fixed", allow_duplicate_side_effects=True)
        claim = store.claim("dead-1", worker_id="w", lease_ttl=60)
        store.finish("dead-1", claim.lease_id, Event.SUCCEED, worker_id="w")
        assert store.get("dead-1").status.value == "SUCCEEDED"
        # Alertmanager drops a resolution whose endsAt is still in its future (the firing endsAt
        # wins the merge): the engine's clock stays at real time here.
        clock.now = store.now()
        evaluation, report = engine.run_once()
        assert [s.labels["actor"] for s in evaluation.firing] == ["other"]
        resolved = [s for s in evaluation.states.values() if s.state == "resolved"]
        assert [s.labels["actor"] for s in resolved] == ["send"]
        assert report.sent == 1  # the resolution; the alert still firing is not due for a resend yet

        def send_resolved() -> bool:
            return all(a["status"]["state"] != "active" for a in alertmanager.alerts("ReliableDeadLetterGrowth")
                       if a["labels"]["actor"] == "send")

        wait_for(send_resolved, "Alertmanager to resolve the requeued job's alert")
        still = [a for a in alertmanager.alerts("ReliableDeadLetterGrowth") if a["labels"]["actor"] == "other"]
        assert [a["status"]["state"] for a in still] == ["active"]
