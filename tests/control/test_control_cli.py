"""The real `reliable` executable against real stores (SQLite and PostgreSQL): every control command."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from control_helpers import cli, cli_json, ended, make, paused, running

from reliable.cli.main import cli as main
from reliable.states import Event, JobStatus
from reliable.store import StateStore

CONTRACTS = "actors:\n  export:\n    resumable: true\n    checkpoint_schema: 2\n"


@pytest.fixture
def policies(tmp_path: Path) -> str:
    folder = tmp_path / "policies"
    folder.mkdir()
    (folder / "contracts.yaml").write_text(CONTRACTS)
    return str(folder)


def events(store_url: str, job_id: str) -> list[dict[str, object]]:
    result: list[dict[str, object]] = cli_json("jobs", "events", job_id, store_url=store_url)
    return result


def test_pause_then_who_paused_this_job_and_why(store: StateStore, store_url: str) -> None:
    make(store, "j1")
    out = cli_json("pause", "j1", "--reason", "downstream maintenance", "--operator", "dana", store_url=store_url)
    assert out["results"][0]["status"] == "PAUSED" and out["summary"]["done"] == 1
    pause = events(store_url, "j1")[-1]
    assert (pause["event"], pause["operator"], pause["reason"]) == ("pause", "dana", "downstream maintenance")
    assert pause["host"]
    env_pause = cli("pause", "--help", store_url=store_url)
    assert "next checkpoint" in env_pause.stdout


def test_operator_comes_from_the_environment(store: StateStore, store_url: str) -> None:
    running(store, "j1")
    proc = cli("pause", "j1", "--reason", "r", store_url=store_url, env={"RELIABLE_OPERATOR": "erin"})
    assert "asked the worker to pause" in proc.stdout
    assert store.get("j1").pause_requested and events(store_url, "j1")[-1]["operator"] == "erin"


COMMAND_LINES = [["pause"], ["stop"], ["cancel"], ["resume"], ["restart"], ["retry"],
                 ["reconcile", "--as", "succeeded"], ["dlq", "requeue"], ["dlq", "discard"],
                 ["review", "resolve", "--as", "succeeded"]]


@pytest.mark.parametrize("command", COMMAND_LINES, ids=lambda c: "-".join(c[:2]))
def test_every_command_without_a_reason_is_a_usage_error_that_writes_nothing(store: StateStore, store_url: str,
                                                                             command: list[str]) -> None:
    ended(store, "j", Event.NEED_REVIEW)
    before = store.events("j")
    runner = CliRunner()
    for extra in ([], ["--reason", "  "], ["--dry-run"], ["--queue", "exports", "--yes"]):
        result = runner.invoke(main, [*command, "j", *extra, "--store", store_url], env={"RELIABLE_OPERATOR": "carol"})
        assert result.exit_code == 2, result.output
        assert "--reason is required" in result.output and "nothing was done" in result.output
    # Checked before the store is opened: an unreachable store is not even tried.
    result = runner.invoke(main, [*command, "j", "--store", "postgresql+psycopg://nobody@127.0.0.1:1/none"])
    assert result.exit_code == 2 and "--reason is required" in result.output
    assert store.events("j") == before and store.get("j").status is JobStatus.REVIEW


def test_stop_and_cancel(store: StateStore, store_url: str) -> None:
    running(store, "r")
    make(store, "p")
    cli("stop", "r", "--reason", "runaway", store_url=store_url)
    assert store.get("r").status is JobStatus.STOPPING
    out = cli_json("cancel", "p", "--reason", "withdrawn", store_url=store_url)
    assert out["results"][0]["status"] == "CANCELLED"


def test_cancel_says_partial_side_effects_remain(store: StateStore, store_url: str) -> None:
    paused(store, "j", effects=2)
    proc = cli("cancel", "j", "--reason", "r", store_url=store_url)
    assert "partial side effects remain" in proc.stderr
    assert "partial_effects_remain" in [e["event"] for e in events(store_url, "j")]


def test_resume_with_policies_and_refusals(store: StateStore, store_url: str, policies: str) -> None:
    paused(store, "ok", checkpoint=7)
    paused(store, "old", schema=1)
    proc = cli("resume", "ok", "--reason", "r", store_url=store_url, check=1)
    assert "not resumable" in proc.stderr and "reliable restart ok" in proc.stderr
    out = cli_json("resume", "ok", "--reason", "r", "--policies", policies, store_url=store_url)
    assert out["results"][0]["status"] == "PENDING" and store.get("ok").checkpoint == 7
    proc = cli("resume", "ok", "--reason", "r", "--policies", policies, store_url=store_url, check=1)
    assert "cannot resume a PENDING job" in proc.stderr
    proc = cli("resume", "old", "--reason", "r", "--policies", policies, store_url=store_url, check=1)
    assert "schema 1 but actor 'export' now expects 2" in proc.stderr


def test_restart_retry_reconcile(store: StateStore, store_url: str) -> None:
    ended(store, "f", Event.FAIL, checkpoint=3)
    ended(store, "d", Event.DEAD_LETTER, checkpoint=3)
    ended(store, "v", Event.NEED_REVIEW)
    out = cli_json("restart", "f", "--reason", "input fixed", store_url=store_url)
    assert out["results"][0]["status"] == "PENDING" and store.get("f").checkpoint is None
    out = cli_json("retry", "d", "--reason", "API back", store_url=store_url)
    assert out["results"][0]["event"] == "requeue" and store.get("d").checkpoint == 3
    proc = cli("reconcile", "v", "--reason", "r", store_url=store_url, check=2)
    assert "--as" in proc.stderr
    out = cli_json("reconcile", "v", "--as", "succeeded", "--reason", "found it", store_url=store_url)
    assert out["results"][0]["status"] == "SUCCEEDED"


def test_bulk_needs_yes_dry_run_changes_nothing_limit_applies(store: StateStore, store_url: str) -> None:
    for i in range(5):
        make(store, f"j{i}")
    make(store, "other", queue="billing")
    proc = cli("pause", "--queue", "exports", "--reason", "r", store_url=store_url, check=3)
    assert "5 job(s) match" in proc.stderr and "--yes" in proc.stderr
    assert store.count_by_status() == {JobStatus.PENDING: 6}
    before = [(e.id, e.event) for i in range(5) for e in store.events(f"j{i}")]
    out = cli_json("pause", "--queue", "exports", "--reason", "r", "--dry-run", store_url=store_url)
    assert out["dry_run"] is True and out["summary"]["dry_run"] == 5
    assert store.count_by_status() == {JobStatus.PENDING: 6}
    assert [(e.id, e.event) for i in range(5) for e in store.events(f"j{i}")] == before
    out = cli_json("pause", "--queue", "exports", "--reason", "r", "--yes", "--limit", "3", store_url=store_url)
    assert out["matched"] == 5 and out["summary"]["done"] == 3
    assert store.count_by_status() == {JobStatus.PENDING: 3, JobStatus.PAUSED: 3}
    cli("pause", "j3", "j4", "--reason", "r", store_url=store_url, check=3)  # several ids count as bulk too
    cli("pause", "j3", "j4", "--reason", "r", "--yes", "--rate", "50", store_url=store_url)
    assert store.count_by_status()[JobStatus.PAUSED] == 5


def test_bulk_retry_needs_a_reason(store: StateStore, store_url: str) -> None:
    ended(store, "a", Event.FAIL)
    ended(store, "b", Event.FAIL)
    proc = cli("retry", "--state", "failed", "--yes", store_url=store_url, check=2)
    assert "--reason is required" in proc.stderr
    out = cli_json("retry", "--error-class", "transient", "--yes", "--reason", "API back", store_url=store_url)
    assert out["summary"]["done"] == 2


def test_no_selection_is_an_error(store_url: str) -> None:
    proc = cli("pause", "--reason", "r", store_url=store_url, check=2)
    assert "give job ids or at least one filter" in proc.stderr
    proc = cli("pause", "missing", "--reason", "r", store_url=store_url, check=2)
    assert "no job with id 'missing'" in proc.stderr


OPERATORS = """\
operators:
  dana: [admin]
  "*": [support]
roles:
  admin:
    - {commands: ["*"], queues: ["*"]}
  support:
    - {commands: [pause], queues: [exports]}
"""


def test_authorization_refusal_exit_code_and_audit(store: StateStore, store_url: str, tmp_path: Path) -> None:
    ops = tmp_path / "operators.yaml"
    ops.write_text(OPERATORS)
    paused(store, "j")
    proc = cli("cancel", "j", "--reason", "r", "--operators-file", str(ops), "--operator", "mallory",
               store_url=store_url, check=1)
    assert "operator 'mallory' (roles support) may not cancel jobs on queue 'exports'" in proc.stderr
    assert store.get("j").status is JobStatus.PAUSED
    refused = events(store_url, "j")[-1]
    assert (refused["event"], refused["operator"], refused["reason"]) == ("command_refused", "mallory", "r")
    assert refused["detail"]["command"] == "cancel"  # type: ignore[index]
    cli("cancel", "j", "--reason", "r", store_url=store_url, check=0,
        env={"RELIABLE_OPERATORS_FILE": str(ops), "RELIABLE_OPERATOR": "dana"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("operators: {x: [nope]}\nroles: {}\n")
    proc = cli("pause", "j", "--reason", "r", "--operators-file", str(bad), store_url=store_url, check=2)
    assert f"{bad}:1:" in proc.stderr and "unknown role 'nope'" in proc.stderr


def test_dlq_list_show_requeue_discard(store: StateStore, store_url: str) -> None:
    ended(store, "d1", Event.DEAD_LETTER, checkpoint=2)
    ended(store, "d2", Event.DEAD_LETTER)
    ended(store, "d3", Event.DEAD_LETTER, queue="billing")
    ended(store, "f", Event.FAIL)
    listing = cli_json("dlq", "list", store_url=store_url)
    assert listing["total"] == 3 and {j["job_id"] for j in listing["jobs"]} == {"d1", "d2", "d3"}
    assert cli_json("dlq", "list", "--queue", "billing", store_url=store_url)["total"] == 1
    shown = cli_json("dlq", "show", "d1", store_url=store_url)
    assert shown["last_error"]["class"] == "transient" and shown["checkpoint"]["value"] == 2
    assert len(shown["attempts"]) == 1 and shown["events"][-1]["event"] == "dead_letter"
    assert "attempts" in cli("dlq", "show", "d1", store_url=store_url).stdout
    cli("dlq", "discard", "d2", store_url=store_url, check=2)  # needs a reason
    cli("dlq", "discard", "d2", "--reason", "duplicate", store_url=store_url)
    assert cli_json("dlq", "list", store_url=store_url)["total"] == 2
    assert cli_json("dlq", "list", "--include-discarded", store_url=store_url)["total"] == 3
    out = cli_json("dlq", "requeue", "--queue", "exports", "--reason", "r", store_url=store_url)
    assert [r["job_id"] for r in out["results"]] == ["d1"]  # d2 discarded, d3 other queue, f not DEAD
    assert store.get("d1").status is JobStatus.PENDING and store.get("f").status is JobStatus.FAILED


def test_review_list_show_resolve(store: StateStore, store_url: str) -> None:
    ended(store, "v1", Event.NEED_REVIEW)
    ended(store, "v2", Event.NEED_REVIEW)
    ended(store, "v3", Event.NEED_REVIEW)
    assert cli_json("review", "list", store_url=store_url)["total"] == 3
    assert cli_json("review", "show", "v1", store_url=store_url)["job"]["status"] == "REVIEW"
    cli("review", "resolve", "v1", "--as", "cancelled", store_url=store_url, check=2)  # needs a reason
    out = cli_json("review", "resolve", "v1", "--as", "cancelled", "--reason", "refunded by hand",
                   store_url=store_url)
    assert out["results"][0]["status"] == "CANCELLED"
    cli("review", "resolve", "--as", "succeeded", "--reason", "ok", store_url=store_url, check=3)
    out = cli_json("review", "resolve", "--as", "succeeded", "--reason", "ok", "--yes", "--queue", "exports",
                   store_url=store_url)
    assert out["summary"]["done"] == 2 and store.get("v2").status is JobStatus.SUCCEEDED


def test_help_is_complete() -> None:
    top = cli("--help", store_url=None)
    for name in ("pause", "stop", "cancel", "resume", "restart", "retry", "reconcile", "dlq", "review"):
        assert f"\n  {name} " in top.stdout
    for command in (["pause"], ["stop"], ["cancel"], ["resume"], ["restart"], ["retry"], ["reconcile"],
                    ["dlq", "requeue"], ["dlq", "discard"], ["review", "resolve"]):
        proc = cli(*command, "--help", store_url=None)
        assert "--reason" in proc.stdout and "Exit status" in proc.stdout and "--dry-run" in proc.stdout
    for command in (["dlq", "list"], ["dlq", "show"], ["review", "list"], ["review", "show"]):
        assert "--json" in cli(*command, "--help", store_url=None).stdout
