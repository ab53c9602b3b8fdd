"""`retry`, `restart` and `dlq requeue` of a non-idempotent job need --allow-duplicate-side-effects (API, bulk, CLI)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from control_helpers import cli, cli_json, ended, make

from reliable.control import Control
from reliable.errors import ControlRefused
from reliable.operators import Operator
from reliable.policy import Policy
from reliable.states import Event, JobStatus
from reliable.store import StateStore

ALICE = Operator("alice", "ops-box", "test")
NOT_IDEMPOTENT = {"idempotent": False}


@pytest.fixture
def control(store: StateStore) -> Control:
    return Control(store, identity=ALICE)


def dead(store: StateStore, job_id: str, **kw: object) -> None:
    ended(store, job_id, Event.DEAD_LETTER, **kw)  # type: ignore[arg-type]


def event_names(store: StateStore, job_id: str) -> list[str]:
    return [e.event for e in store.events(job_id)]


def test_requeue_of_a_non_idempotent_job_is_refused_and_says_why(store: StateStore, control: Control) -> None:
    dead(store, "pay", contract=NOT_IDEMPOTENT)
    before = event_names(store, "pay")
    with pytest.raises(ControlRefused) as caught:
        control.requeue("pay", reason="test")
    message = str(caught.value)
    assert "not idempotent" in message and "may already have happened" in message
    assert "reconcile" in message and "--allow-duplicate-side-effects" in message
    assert store.get("pay").status is JobStatus.DEAD
    # Audited like every other refusal (one `command_refused` event), nothing else written.
    refused = [e for e in store.events("pay")][len(before):]
    assert [(e.event, e.operator, e.detail["command"]) for e in refused] == [("command_refused", "alice", "requeue")]


def test_requeue_with_the_flag_runs_it_and_records_that_it_was_allowed(store: StateStore, control: Control) -> None:
    dead(store, "pay", contract=NOT_IDEMPOTENT)
    result = control.requeue("pay", reason="test", allow_duplicate_side_effects=True)
    assert result.outcome == "done" and store.get("pay").status is JobStatus.PENDING
    assert any("not idempotent" in warning for warning in result.warnings)
    requeue = store.events("pay")[-1]
    assert (requeue.event, requeue.detail["allow_duplicate_side_effects"]) == ("requeue", True)


def test_a_dry_run_refusal_writes_nothing(store: StateStore, control: Control) -> None:
    dead(store, "pay", contract=NOT_IDEMPOTENT)
    before = event_names(store, "pay")
    result = control.requeue("pay", reason="test", dry_run=True)
    assert result.outcome == "refused" and "not idempotent" in result.message
    assert event_names(store, "pay") == before


def test_idempotent_jobs_need_no_flag(store: StateStore, control: Control) -> None:
    dead(store, "plain")  # no contract: idempotent, like JobContract's default
    dead(store, "safe", contract={"idempotent": True})
    assert control.requeue("plain", reason="test").outcome == "done"
    assert control.requeue("safe", reason="test").outcome == "done"


def test_the_policy_can_make_a_queue_non_idempotent(store: StateStore, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("queues:\n  payments: {idempotent: false}\n")
    dead(store, "pay", queue="payments")
    with pytest.raises(ControlRefused, match="not idempotent"):
        Control(store, identity=ALICE, policy=Policy.load(path)).requeue("pay", reason="test")
    # without the policy nobody said so
    assert Control(store, identity=ALICE).requeue("pay", reason="test").outcome == "done"


def test_bulk_refuses_each_non_idempotent_job_and_runs_the_rest(store: StateStore, control: Control) -> None:
    dead(store, "pay1", contract=NOT_IDEMPOTENT)
    dead(store, "mail")
    dead(store, "pay2", contract=NOT_IDEMPOTENT)
    jobs = [store.get(i) for i in ("pay1", "mail", "pay2")]
    report = control.run_bulk("requeue", jobs, reason="provider back")
    assert {r.job_id: r.outcome for r in report.results} == {"pay1": "refused", "mail": "done", "pay2": "refused"}
    assert all("not idempotent" in r.message for r in report.results if r.outcome == "refused")
    jobs = [store.get(i) for i in ("pay1", "pay2")]
    report = control.run_bulk("requeue", jobs, reason="checked with the provider: not charged",
                              allow_duplicate_side_effects=True)
    assert [r.outcome for r in report.results] == ["done", "done"]
    assert store.get("pay1").status is JobStatus.PENDING and store.get("pay2").status is JobStatus.PENDING


def test_cli_retry_and_dlq_requeue_refuse_without_the_flag(store: StateStore, store_url: str) -> None:
    dead(store, "pay", contract=NOT_IDEMPOTENT)
    for command in (("retry",), ("dlq", "requeue")):
        proc = cli(*command, "pay", "--reason", "r", store_url=store_url, check=1)
        assert "not idempotent" in proc.stderr and "--allow-duplicate-side-effects" in proc.stderr, proc.stderr
        assert store.get("pay").status is JobStatus.DEAD
    out = cli_json("dlq", "requeue", "pay", "--allow-duplicate-side-effects", "--reason", "checked: not charged",
                   store_url=store_url)
    assert out["results"][0]["status"] == "PENDING" and out["results"][0]["warnings"]
    assert "--allow-duplicate-side-effects" in cli("retry", "--help", store_url=None).stdout


def test_cli_bulk_requeue_needs_the_flag_for_non_idempotent_jobs(store: StateStore, store_url: str) -> None:
    dead(store, "pay", queue="payments", contract=NOT_IDEMPOTENT)
    dead(store, "pay2", queue="payments")
    proc = cli("dlq", "requeue", "--queue", "payments", "--yes", "--reason", "provider back", "--json",
                   store_url=store_url, check=1)
    summary = json.loads(proc.stdout)["summary"]
    assert (summary["refused"], summary["done"]) == (1, 1) and store.get("pay").status is JobStatus.DEAD
    assert store.get("pay2").status is JobStatus.PENDING
    cli("retry", "--queue", "payments", "--state", "DEAD", "--yes", "--reason", "checked: not charged",
            "--allow-duplicate-side-effects", store_url=store_url)
    assert store.get("pay").status is JobStatus.PENDING



def test_restart_of_a_non_idempotent_job_that_ran_needs_the_flag(store: StateStore, control: Control) -> None:
    ended(store, "pay", Event.NEED_REVIEW, contract=NOT_IDEMPOTENT)
    with pytest.raises(ControlRefused, match=r"not idempotent.*--allow-duplicate-side-effects"):
        control.restart("pay", reason="not charged, rerun")
    assert store.get("pay").status is JobStatus.REVIEW
    result = control.restart("pay", reason="checked: not charged", allow_duplicate_side_effects=True)
    assert result.outcome == "done" and store.get("pay").status is JobStatus.PENDING
    restart = store.events("pay")[-1]
    assert (restart.event, restart.detail["allow_duplicate_side_effects"]) == ("restart", True)


def test_restart_of_a_non_idempotent_job_that_never_ran_needs_no_flag(store: StateStore, control: Control) -> None:
    make(store, "pay", contract=NOT_IDEMPOTENT)
    control.cancel("pay", reason="not now")
    assert control.restart("pay", reason="now").job.status is JobStatus.PENDING  # type: ignore[union-attr]


def test_retry_or_resume_of_a_review_job_points_to_reconcile(store: StateStore, control: Control) -> None:
    ended(store, "pay", Event.NEED_REVIEW, contract=NOT_IDEMPOTENT)
    for command in (control.requeue, control.resume):
        with pytest.raises(ControlRefused, match="reliable reconcile JOB --as succeeded"):
            command("pay", reason="r")


def test_cli_restart_takes_the_flag(store: StateStore, store_url: str) -> None:
    ended(store, "pay", Event.DEAD_LETTER, contract=NOT_IDEMPOTENT)
    cli("restart", "pay", "--reason", "r", store_url=store_url, check=1)
    assert store.get("pay").status is JobStatus.DEAD
    cli("restart", "pay", "--reason", "checked", "--allow-duplicate-side-effects", store_url=store_url)
    assert store.get("pay").status is JobStatus.PENDING
