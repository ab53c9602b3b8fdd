"""Retention (`reliable.store.retention`, `reliable db prune`): what is deleted and what is kept, on
both databases, at a scale of a few thousand jobs."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from reliable.cli.main import cli
from reliable.errors import ConfigError
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore, retention
from reliable.store.bulk_operations import recent_operation_rows
from reliable.store.workflows import WorkflowStore

from support import Clock

DAY = 86400.0
OLD_SUCCEEDED = 2500


def _job(job_id: str, workflow_id: str | None = None) -> NewJob:
    return NewJob(job_id, queue="default", actor="export", message={"args": [job_id]}, workflow_id=workflow_id)


def _succeed(store: StateStore, job_id: str) -> None:
    assert store.fast_succeed(job_id, worker_id="w", attempt_id=f"a-{job_id}") is not None


def _workflow(store: StateStore, workflow_id: str, job_id: str) -> None:
    node = {"node": "only", "position": 0, "actor": "export", "queue": "default", "message": "{}", "owner": None,
            "checkpoint_schema": None, "code_version": None, "digest": "d", "trigger": "all_succeeded",
            "on_upstream_failure": "fail", "pass_results": False, "job_id": job_id}
    WorkflowStore(store).create({"workflow_id": workflow_id, "name": "wf", "status": "RUNNING", "owner": None,
                                 "created_by": "t"}, [node], [], [_job(job_id, workflow_id)])


def _end_workflow(store: StateStore, workflow_id: str) -> None:
    with WorkflowStore(store).locked(workflow_id) as locked:
        locked.save(status="SUCCEEDED", hold=None)


def _fill(store: StateStore, clock: Clock) -> dict[str, str]:
    """Old history (10 days ago) of every kind, and a recent job; the expected fate of the named ones."""
    clock.now -= 10 * DAY
    store.register_many([_job(f"old-{i}") for i in range(OLD_SUCCEEDED)])
    for i in range(OLD_SUCCEEDED):
        _succeed(store, f"old-{i}")
    fate: dict[str, str] = {}
    # A job with an attempt and an effect, one FAILED, one DEAD: deleted with everything they wrote.
    for job_id, event in (("effectful", Event.SUCCEED), ("failed", Event.FAIL), ("dead", Event.DEAD_LETTER)):
        store.register(_job(job_id))
        claim = store.claim(job_id, worker_id="w", lease_ttl=30)
        store.record_effect(job_id, claim.lease_id, "unit-1", attempt_id=claim.attempt_id)
        store.finish(job_id, claim.lease_id, event)
        fate[job_id] = "deleted"
    # Jobs not at rest, or at rest but not finished: kept however old.
    for job_id in ("pending", "running", "paused", "review"):
        store.register(_job(job_id))
        fate[job_id] = "kept"
    store.claim("running", worker_id="w", lease_ttl=10 * DAY + 60)
    store.transition("paused", Event.PAUSE, operator="t", reason="r")
    claim = store.claim("review", worker_id="w", lease_ttl=30)
    store.finish("review", claim.lease_id, Event.NEED_REVIEW)
    # A live workflow's finished node: kept. An ended workflow's node: deleted with its workflow.
    _workflow(store, "live-wf", "live-node")
    _succeed(store, "live-node")
    fate["live-node"] = "kept"
    _workflow(store, "ended-wf", "ended-node")
    _succeed(store, "ended-node")
    _end_workflow(store, "ended-wf")
    fate["ended-node"] = "deleted"
    clock.now += 10 * DAY
    store.register(_job("recent"))
    _succeed(store, "recent")
    fate["recent"] = "kept"
    return fate


def test_prune_deletes_finished_history_older_than_the_cut_and_keeps_the_rest(
        clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    fate = _fill(store, clock)
    cut = clock.now - 7 * DAY
    counted = retention.count_prunable(store, cut)
    deleted_jobs = OLD_SUCCEEDED + 4  # effectful, failed, dead, ended-node
    assert (counted.jobs, counted.workflows) == (deleted_jobs, 1)
    assert counted.events == 2 * OLD_SUCCEEDED + 3 * 3 + 2  # enqueued + succeeded; + claimed; ended-node 2
    assert (counted.attempts, counted.effects) == (3, 3)
    batches: list[int] = []
    result = retention.prune(store, cut, batch_size=400, operator="alice", reason="test retention",
                             planned=counted, on_batch=lambda total: batches.append(total.jobs))
    assert result.complete
    assert result.counts.jobs == deleted_jobs and result.counts.events == counted.events
    assert (result.counts.attempts, result.counts.effects, result.counts.workflows) == (3, 3, 1)
    assert result.counts.workflow_rows == 2  # the node and its submitted event
    assert batches == sorted(batches) and len(batches) >= deleted_jobs // 400  # bounded batches
    for job_id, expected in fate.items():
        found = store.find(job_id)
        assert (found is None) == (expected == "deleted"), job_id
        if found is None:
            assert store.events(job_id) == [] and store.attempts(job_id) == [] and store.effects(job_id) == []
    assert store.find("old-0") is None and store.find(f"old-{OLD_SUCCEEDED - 1}") is None
    assert [e.event for e in store.events("running")] == ["enqueued", "claim"]  # a kept job keeps its history
    assert WorkflowStore(store).find("ended-wf") is None and WorkflowStore(store).nodes("ended-wf") == []
    assert WorkflowStore(store).find("live-wf") is not None
    [audit] = [row for row in recent_operation_rows(store, limit=10) if row.command == "prune"]
    assert (audit.operator, audit.reason, audit.status, audit.done) == ("alice", "test retention", "finished",
                                                                        deleted_jobs)
    assert json.loads(audit.counts)["by_outcome"]["jobs"] == deleted_jobs
    assert retention.count_prunable(store, cut).rows == 0  # a second run finds nothing


def test_the_cut_and_the_states_narrow_what_goes(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    for job_id in ("a", "b"):
        store.register(_job(job_id))
        _succeed(store, job_id)
    store.register(_job("c"))
    claim = store.claim("c", worker_id="w", lease_ttl=30)
    store.finish("c", claim.lease_id, Event.FAIL)
    clock.now += 3600
    assert retention.count_prunable(store, clock.now - 7200).jobs == 0  # finished an hour ago: after the cut
    assert retention.count_prunable(store, clock.now - 60, states=["failed"]).jobs == 1
    result = retention.prune(store, clock.now - 60, states=["FAILED"], operator="t", reason="r")
    assert result.counts.jobs == 1 and store.find("c") is None
    assert store.get("a").status is JobStatus.SUCCEEDED
    with pytest.raises(ConfigError, match="REVIEW is not a terminal state"):
        retention.count_prunable(store, clock.now, states=["REVIEW"])


def test_ended_operations_older_than_the_cut_go_too(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    retention.prune(store, clock.now, operator="t", reason="first")  # leaves its own audit record, ended
    clock.now += 2 * DAY
    assert retention.count_prunable(store, clock.now - DAY).operations == 1
    result = retention.prune(store, clock.now - DAY, operator="t", reason="second")
    assert result.counts.operations == 1
    assert [row.reason for row in recent_operation_rows(store, limit=10)] == ["second"]


def test_the_cli_counts_first_and_needs_yes_without_a_terminal(store_url: str) -> None:
    store = StateStore(store_url)
    store.register(_job("x"))
    _succeed(store, "x")
    store.close()
    runner = CliRunner()
    dry = runner.invoke(cli, ["db", "prune", "--store", store_url, "--older-than", "0.001s", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert dry.output.startswith("would delete 1 jobs finished before")
    refused = runner.invoke(cli, ["db", "prune", "--store", store_url, "--older-than", "0.001s"])
    assert refused.exit_code == 2 and "pass --yes" in refused.output
    done = runner.invoke(cli, ["db", "prune", "--store", store_url, "--older-than", "0.001s", "--yes", "--json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["counted"]["jobs"] == 1 and report["deleted"]["jobs"] == 1 and report["operation_id"]
    again = runner.invoke(cli, ["db", "prune", "--store", store_url, "--older-than", "1d", "--yes"])
    assert again.exit_code == 0 and again.output.startswith("nothing to delete: 0 jobs"), again.output
