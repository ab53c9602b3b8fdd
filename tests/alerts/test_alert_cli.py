"""`reliable alerts check|test|export-prometheus` through the real CLI entry point and a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from reliable.alerts import AlertConfig, AlertEngine, load_config, load_rules
from reliable.alerts.runbooks import RunbookRenderer
from reliable.cli.main import cli
from reliable.errors import PolicyError
from reliable.states import Event
from reliable.store import NewJob, StateStore

from support import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository


def test_check_ok_on_defaults() -> None:
    result = CliRunner().invoke(cli, ["alerts", "check", str(SHIPPED / "alert_rules"),
                                      "--runbooks", str(SHIPPED / "runbooks")])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("OK: ")


def test_check_one_line_per_problem_exit_2(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text("rules:\n  - name: A\n    kind: store\n"
                                     "    condition: {type: stuck, older_than: 1h}\n"
                                     "    severity: loud\n    owner: t\n    route: page\n")
    (tmp_path / "b.yaml").write_text("rules:\n  - name: B\n    kind: store\n    condition: {type: nope}\n"
                                     "    severity: info\n    owner: t\n    route: page\n")
    result = CliRunner().invoke(cli, ["alerts", "check", str(tmp_path), "--runbooks", str(SHIPPED / "runbooks")])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"error: {tmp_path / 'a.yaml'}:5: severity must be one of")
    assert lines[1].startswith(f"error: {tmp_path / 'b.yaml'}:4: condition.type must be one of")


def test_test_prints_what_would_fire_and_sends_nothing(sqlite_url: str) -> None:
    store = StateStore(sqlite_url)
    store.register(NewJob(job_id="j-cli", queue="exports", actor="export", message={}, owner="team-data"))
    store.claim("j-cli", worker_id="w", lease_ttl=60)
    (Path(sqlite_url.removeprefix("sqlite:///")).parent / "rules.yaml").write_text(
        "rules:\n  - name: Stuck\n    kind: store\n    condition: {type: stuck, older_than: 0.5}\n"
        "    severity: info\n    owner: from_job\n    route: ticket\n    runbook: job_stuck.md.j2\n")
    # The command evaluates at the database's clock: wait until that clock has the job 0.5 s old.
    wait_for(lambda: store.now() - (store.get("j-cli").started_at or float("inf")) >= 0.5, "the job to be 0.5 s old")
    rules = str(Path(sqlite_url.removeprefix("sqlite:///")).parent / "rules.yaml")
    args = ["alerts", "test", "--store", sqlite_url, "--rules", rules, "--runbooks", str(SHIPPED / "runbooks")]
    result = CliRunner().invoke(cli, [*args, "--json"])
    assert result.exit_code == 0, result.output
    (alert,) = json.loads(result.output)["alerts"]
    assert alert["labels"]["job_id"] == "j-cli" and alert["labels"]["owner"] == "team-data"
    assert "reliable stop j-cli --reason alert:Stuck" in alert["runbook"]  # rendered for the operator, not sent
    assert set(alert["annotations"]) == {"summary", "description", "runbook_url"}
    # the exporter's page, for this alert's job
    assert alert["annotations"]["runbook_url"] == "http://127.0.0.1:9464/runbooks/stuck?queue=exports&actor=export&job_id=j-cli"
    based = CliRunner().invoke(cli, [*args, "--json"], env={"RELIABLE_RUNBOOK_BASE_URL": "https://wiki.example/rb#"})
    assert json.loads(based.output)["alerts"][0]["annotations"]["runbook_url"] == "https://wiki.example/rb#stuck"
    text = CliRunner().invoke(cli, args)
    assert "Stuck{" in text.output and "1 alert(s) would fire" in text.output
    from reliable.alerts.persist import load_alerts
    assert load_alerts(store) == {}  # nothing written


def test_run_without_alertmanager_is_a_clear_error(sqlite_url: str) -> None:
    result = CliRunner().invoke(cli, ["alerts", "run", "--store", sqlite_url, "--rules", str(SHIPPED / "alert_rules"),
                                      "--once"])
    assert result.exit_code == 2 and "no Alertmanager" in result.output


def test_export_to_stdout() -> None:
    result = CliRunner().invoke(cli, ["alerts", "export-prometheus", "--rules", str(SHIPPED / "alert_rules")])
    assert result.exit_code == 0 and "alert: ReliableHeartbeatFailures" in result.output


def test_run_once_exits_1_when_delivery_fails(sqlite_url: str, tmp_path: Path) -> None:
    store = StateStore(sqlite_url)
    store.register(NewJob(job_id="j-dead", queue="exports", actor="export", message={}))
    claim = store.claim("j-dead", worker_id="w", lease_ttl=60)
    store.finish("j-dead", claim.lease_id, Event.DEAD_LETTER, worker_id="w")
    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    args = ["alerts", "run", "--store", sqlite_url, "--once", "--alertmanager", down]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    assert "1 firing; sent 0, failed 1" in result.output
    nothing_due = CliRunner().invoke(cli, args)  # the alert is backing off: nothing failed this time
    assert nothing_due.exit_code == 0, nothing_due.output


def test_runbook_base_url_must_be_absolute(tmp_path: Path) -> None:
    for base in ("runbooks/", "", "https://wiki.example/rb"):
        result = CliRunner().invoke(cli, ["alerts", "export-prometheus", "--runbook-base-url", base])
        assert result.exit_code == 2 and "runbook_base_url must" in result.output, (base, result.output)
    (tmp_path / "alerts.yaml").write_text("alertmanagers: [http://127.0.0.1:9093]\nrunbook_base_url: /runbooks/\n")
    result = CliRunner().invoke(cli, ["alerts", "export-prometheus", "--config", str(tmp_path / "alerts.yaml")])
    assert result.exit_code == 2
    assert f"{tmp_path / 'alerts.yaml'}:2" in result.output and "absolute http(s) URL" in result.output


def test_settings_runbook_annotation_sends_the_runbook_too(sqlite_url: str, tmp_path: Path) -> None:
    (tmp_path / "alerts.yaml").write_text("runbook_annotation: true\nrunbook_base_url: https://wiki.example/rb/\n")
    config = load_config(tmp_path / "alerts.yaml")
    assert config.runbook_annotation and config.runbook_base_url == "https://wiki.example/rb/"
    assert not AlertConfig().runbook_annotation  # off by default
    (tmp_path / "bad.yaml").write_text("runbook_annotation: yes please\n")
    with pytest.raises(PolicyError, match=r"bad\.yaml:1: runbook_annotation must be true or false"):
        load_config(tmp_path / "bad.yaml")
    store = StateStore(sqlite_url)
    store.register(NewJob(job_id="j-dead", queue="exports", actor="export", message={}))
    claim = store.claim("j-dead", worker_id="w", lease_ttl=60)
    store.finish("j-dead", claim.lease_id, Event.DEAD_LETTER, worker_id="w")
    rules = load_rules(SHIPPED / "alert_rules")
    renderer = RunbookRenderer(SHIPPED / "runbooks", base_url=config.runbook_base_url)
    for flag in (False, True):
        engine = AlertEngine(store, rules, renderer, runbook_annotation=flag)
        (candidate,) = engine.evaluate(persist=False).candidates
        annotations = engine.annotations(candidate)
        assert ("runbook" in annotations) is flag
        assert annotations["runbook_url"] == "https://wiki.example/rb/reliabledeadlettergrowth?queue=exports&actor=export"
    assert "reliable dlq requeue j-dead" in annotations["runbook"]


def test_check_takes_path_or_rules_like_the_other_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    shipped = len(load_rules(SHIPPED / "alert_rules"))
    for args in ([], ["--rules", str(SHIPPED / "alert_rules")], [str(SHIPPED / "alert_rules")]):
        done = runner.invoke(cli, ["alerts", "check", *args])
        assert done.exit_code == 0 and done.output.startswith(f"OK: {shipped} rules"), (args, done.output)
    both = runner.invoke(cli, ["alerts", "check", str(SHIPPED / "alert_rules"), "--rules", str(tmp_path)])
    assert both.exit_code == 2 and "two rule paths" in both.output


def test_dead_letter_growth_counts_each_dead_job_once_and_forgets_discarded_ones(store: StateStore) -> None:
    def dead(job_id: str) -> None:
        claim = store.claim(job_id, worker_id="w", lease_ttl=60)
        store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w")

    for job_id in ("twice", "once"):
        store.register(NewJob(job_id=job_id, queue="mail", actor="send", message={}))
        dead(job_id)
    store.transition("twice", Event.REQUEUE, operator="alice", reason="retry")
    dead("twice")  # dead-lettered twice in the window: still one job
    rules = [r for r in load_rules(SHIPPED / "alert_rules") if r.name == "ReliableDeadLetterGrowth"]
    engine = AlertEngine(store, rules, RunbookRenderer(SHIPPED / "runbooks"))
    (candidate,) = engine.evaluate(persist=False).candidates
    assert candidate.value == 2
    store.record_event("once", "discarded", operator="alice", reason="not needed")
    store.record_event("twice", "discarded", operator="alice", reason="not needed")
    assert engine.evaluate(persist=False).candidates == []  # discarded: the alert resolves


def test_failure_rate_leaves_rate_limited_retries_out(store: StateStore) -> None:
    rules = [r for r in load_rules(SHIPPED / "alert_rules") if r.name == "ReliableActorFailureRate"]
    engine = AlertEngine(store, rules, RunbookRenderer(SHIPPED / "runbooks"))

    def attempt(job_id: str, event: Event, rate_limited: bool = False) -> None:
        claim = store.claim(job_id, worker_id="w", lease_ttl=60)
        store.finish(job_id, claim.lease_id, event, worker_id="w", retry_delay=60 if event is Event.RETRY else None,
                     detail={"rate_limited": rate_limited} if event is Event.RETRY else None)

    for n in range(25):  # 25 attempts of call_api, every one a 429 honoured
        store.register(NewJob(job_id=f"r{n}", queue="partner", actor="call_api", message={}))
        attempt(f"r{n}", Event.RETRY, rate_limited=True)
    assert engine.evaluate(persist=False).candidates == []  # throttling is not the actor failing
    for n in range(25):  # the same, failing for real
        store.register(NewJob(job_id=f"f{n}", queue="partner", actor="call_api", message={}))
        attempt(f"f{n}", Event.RETRY)
    (candidate,) = engine.evaluate(persist=False).candidates
    assert candidate.value == 1.0 and candidate.labels["actor"] == "call_api"
