"""`--api URL`: the CLI through the HTTP API (no database credentials), against the real app served by uvicorn.

Every read is compared with the store path's output: same tables, same JSON, same exit statuses.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'reliable[web]')")

from click.testing import Result
from control_helpers import RELIABLE, check, ended, make, paused, run, running, via
from starlette.applications import Starlette

from reliable.access import ApiTokens
from reliable.cli import api_client, via_api
from reliable.operations import Operations
from reliable.states import Event, JobStatus
from reliable.store import StateStore
from reliable.web import WebConfig, create_app

from cli_api_server import add_contract_routes, serve
from support import wait_for

RESUMABLE = {"resumable": True, "checkpoint_schema": 2}


@pytest.fixture
def api_store(sqlite_url: str) -> Iterator[StateStore]:
    """The store behind the API (SQLite: the API path is the same on both databases)."""
    store = StateStore(sqlite_url)
    yield store
    store.close()


@pytest.fixture
def api_app(api_store: StateStore) -> Starlette:
    """The app the CLI talks to."""
    app = create_app(api_store, config=WebConfig(secret_key="t"))
    add_contract_routes(app)  # stand-ins only for routes the app does not serve yet
    return app


@pytest.fixture
def api_url(api_app: Starlette, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The served app's URL; the CLI polls bulk operations without waiting."""
    monkeypatch.setattr(via_api, "_wait", lambda seconds: None)
    with serve(api_app) as url:
        yield url


@pytest.fixture
def tokens(api_store: StateStore) -> dict[str, str]:
    """A token per role: otto operates queue exports only."""
    made = ApiTokens(api_store)
    return {"viewer": made.create("vera", "viewer")[1], "operator": made.create("otto", "operator",
                                                                                 queues=["exports"])[1],
            "admin": made.create("ada", "admin")[1]}




# -- commands on job ids -------------------------------------------------------------------------

def test_pause_through_the_api_prints_as_the_store_path_and_is_audited_under_the_token(
        api_store: StateStore, sqlite_url: str, api_url: str, tokens: dict[str, str]) -> None:
    make(api_store, "job-api-1")
    make(api_store, "job-sto-1")
    by_api = check(via(api_url, tokens["operator"], "pause", "job-api-1", "--reason", "maintenance"))
    by_store = check(run("pause", "job-sto-1", "--reason", "maintenance", "--store", sqlite_url))
    assert by_api.stdout == by_store.stdout.replace("job-sto-1", "job-api-1") == "pause job-api-1: moved to PAUSED\n"
    event = api_store.events("job-api-1")[-1]
    assert (event.event, event.operator, event.reason) == ("pause", "otto", "maintenance")
    assert event.detail["source"] == "api:token"


def test_json_results_have_the_store_paths_shape(api_store: StateStore, sqlite_url: str, api_url: str,
                                                 tokens: dict[str, str]) -> None:
    running(api_store, "job-api-1")
    running(api_store, "job-sto-1")
    by_api = json.loads(check(via(api_url, tokens["admin"], "stop", "job-api-1", "--reason", "r", "--json")).stdout)
    by_store = json.loads(check(run("stop", "job-sto-1", "--reason", "r", "--json", "--store", sqlite_url)).stdout)
    assert json.loads(json.dumps(by_api).replace("job-api-1", "job-sto-1")) == by_store
    assert by_api["results"][0]["outcome"] == "requested"


def test_a_refused_command_exits_1_with_the_servers_message_as_on_the_store_path(
        api_store: StateStore, sqlite_url: str, api_url: str, tokens: dict[str, str]) -> None:
    make(api_store, "job-1")
    by_api = check(via(api_url, tokens["admin"], "resume", "job-1", "--reason", "r"), 1)
    by_store = check(run("resume", "job-1", "--reason", "r", "--store", sqlite_url), 1)
    assert "cannot resume a PENDING job" in by_api.stderr
    assert by_api.stderr.splitlines()[0] == by_store.stderr.splitlines()[0]
    refused = json.loads(check(via(api_url, tokens["admin"], "resume", "job-1", "--reason", "r", "--json"), 1).stdout)
    assert refused["results"][0]["outcome"] == "refused" and refused["summary"]["refused"] == 1


@pytest.mark.parametrize("role", ["viewer", "operator"])
def test_not_authorized_is_refused_exit_1_and_audited(api_store: StateStore, api_url: str, tokens: dict[str, str],
                                                      role: str) -> None:
    make(api_store, "job-1", queue="billing")  # the operator's token is for queue exports only
    result = check(via(api_url, tokens[role], "pause", "job-1", "--reason", "r"), 1)
    assert "may not pause jobs on queue 'billing'" in result.stderr
    assert api_store.get("job-1").status is JobStatus.PENDING
    assert api_store.events("job-1")[-1].event == "command_refused"


def test_several_ids_by_prefix_need_yes_then_act_on_each(api_store: StateStore, api_url: str,
                                                        tokens: dict[str, str]) -> None:
    make(api_store, "aaaaaa-1")
    make(api_store, "bbbbbb-2")
    unconfirmed = check(via(api_url, tokens["admin"], "pause", "aaaaaa", "bbbbbb-2", "--reason", "r"), 3)
    assert "2 job(s) match" in unconfirmed.stderr and "--yes" in unconfirmed.stderr
    assert api_store.get("aaaaaa-1").status is JobStatus.PENDING
    done = check(via(api_url, tokens["admin"], "pause", "aaaaaa", "bbbbbb-2", "--reason", "r", "--yes", "--json"))
    out = json.loads(done.stdout)
    assert [r["job_id"] for r in out["results"]] == ["aaaaaa-1", "bbbbbb-2"]
    assert out["summary"] == {"done": 2, "skipped_by_limit": 0}
    assert [r["status_before"] for r in out["results"]] == ["PENDING", "PENDING"]


def test_unknown_and_ambiguous_ids_exit_2(api_store: StateStore, api_url: str, tokens: dict[str, str]) -> None:
    make(api_store, "cccccc-1")
    make(api_store, "cccccc-2")
    assert "cccccc-1" in check(via(api_url, tokens["admin"], "pause", "cccccc", "--reason", "r"), 2).stderr
    check(via(api_url, tokens["admin"], "pause", "zzzzzz-9", "--reason", "r"), 2)


def test_reconcile_and_retry_pass_their_options(api_store: StateStore, api_url: str, tokens: dict[str, str]) -> None:
    ended(api_store, "job-review", Event.NEED_REVIEW)
    check(via(api_url, tokens["admin"], "reconcile", "job-review", "--as", "cancelled", "--reason", "refunded"))
    assert api_store.get("job-review").status is JobStatus.CANCELLED
    ended(api_store, "job-dead", Event.DEAD_LETTER, contract={"idempotent": False})
    refused = check(via(api_url, tokens["admin"], "retry", "job-dead", "--reason", "r"), 1)
    assert "idempotent" in refused.stderr
    check(via(api_url, tokens["admin"], "retry", "job-dead", "--reason", "r", "--allow-duplicate-side-effects"))
    assert api_store.get("job-dead").status is JobStatus.PENDING


def test_dry_run_changes_nothing(api_store: StateStore, api_url: str, tokens: dict[str, str]) -> None:
    make(api_store, "job-1")
    result = check(via(api_url, tokens["admin"], "cancel", "job-1", "--reason", "r", "--dry-run"))
    assert "would move to CANCELLED" in result.stdout
    assert api_store.get("job-1").status is JobStatus.PENDING


# -- commands by filter: the bulk operations API -------------------------------------------------

def test_a_filter_counts_confirms_and_follows_a_bulk_operation(api_store: StateStore, api_url: str,
                                                               tokens: dict[str, str]) -> None:
    for i in range(3):
        paused(api_store, f"job-{i}", contract=RESUMABLE)
    paused(api_store, "other", queue="billing", contract=RESUMABLE)
    result = check(via(api_url, tokens["operator"], "resume", "--queue", "exports", "--reason", "back", "--yes"))
    assert "3 job(s) match" in result.stderr
    assert "resume: 3/3" in result.stderr  # progress, one line per change off a terminal
    assert "done: 3" in result.stdout
    assert {api_store.get(f"job-{i}").status for i in range(3)} == {JobStatus.PENDING}
    assert api_store.get("other").status is JobStatus.PAUSED
    assert api_store.events("job-0")[-1].operator == "otto"


def test_a_bulk_operation_reports_refusals_with_exit_1(api_store: StateStore, api_url: str,
                                                       tokens: dict[str, str]) -> None:
    paused(api_store, "job-ok", contract=RESUMABLE)
    paused(api_store, "job-no", contract={"resumable": False})
    result = check(via(api_url, tokens["admin"], "resume", "--state", "paused", "--reason", "r", "--yes", "--json"), 1)
    out = json.loads(result.stdout)
    assert (out["matched"], out["status"], out["summary"]) == (2, "finished", {"done": 1, "refused": 1})


def test_a_bulk_operation_without_yes_is_not_confirmed(api_store: StateStore, api_url: str, api_app: Starlette,
                                                       tokens: dict[str, str]) -> None:
    paused(api_store, "job-1", contract=RESUMABLE)
    paused(api_store, "job-2", contract=RESUMABLE)
    result = check(via(api_url, tokens["admin"], "resume", "--queue", "exports", "--reason", "r"), 3)
    assert "pass --yes" in result.stderr
    assert api_store.get("job-1").status is JobStatus.PAUSED
    statuses = {op["status"] for op in getattr(api_app.state, "cli_test_operations", {}).values()}
    assert statuses <= {"cancelled"}  # the counted operation is withdrawn, not left to expire


def test_a_bulk_dry_run_and_more_jobs_than_the_limit_change_nothing(api_store: StateStore, api_url: str,
                                                                     tokens: dict[str, str]) -> None:
    for i in range(3):
        make(api_store, f"job-{i}")
    dry = json.loads(check(via(api_url, tokens["admin"], "pause", "--state", "pending", "--reason", "r",
                               "--dry-run", "--json")).stdout)
    assert (dry["matched"], dry["dry_run"], len(dry["sample"])) == (3, True, 3)
    assert Operations(api_store).recent() == []  # a dry run is counted only: no operation is recorded
    over = check(via(api_url, tokens["admin"], "pause", "--state", "pending", "--reason", "r", "--yes",
                     "--limit", "2"), 3)
    assert "more than --limit 2" in over.stderr
    none = check(via(api_url, tokens["admin"], "pause", "--queue", "nowhere", "--reason", "r", "--yes"))
    assert "no job matches" in none.stderr
    assert {api_store.get(f"job-{i}").status for i in range(3)} == {JobStatus.PENDING}


def test_ctrl_c_while_following_cancels_the_operation_on_the_server(
        api_store: StateStore, api_url: str, tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(4):
        make(api_store, f"job-{i}")
    polls = []

    def interrupt_second_poll(seconds: float) -> None:
        polls.append(seconds)
        if len(polls) == 2:
            raise KeyboardInterrupt

    # The server's run takes its second job only once the CLI has come back: otherwise, on a loaded
    # machine, it could pause all four between two polls and there would be nothing left to cancel.
    cli_done = threading.Event()
    ran: list[str] = []
    one = Operations._one

    def second_job_waits_for_the_cli(method: Any, job_id: str, reason: str, kwargs: Any) -> dict[str, Any]:
        if kwargs.get("dry_run"):  # the preview's count of what would be refused
            return one(method, job_id, reason, kwargs)
        ran.append(job_id)
        if len(ran) > 1:
            cli_done.wait(60)
        return one(method, job_id, reason, kwargs)

    monkeypatch.setattr(Operations, "_one", staticmethod(second_job_waits_for_the_cli))
    monkeypatch.setattr(via_api, "_wait", interrupt_second_poll)
    try:
        result = check(via(api_url, tokens["admin"], "pause", "--state", "pending", "--reason", "r", "--yes"), 130)
    finally:
        cli_done.set()
    assert "cancelled on the server" in result.stderr
    (op,) = Operations(api_store).recent()
    wait_for(lambda: Operations(api_store).get(op.operation_id).status == "cancelled", "the run to stop")
    paused_now = [i for i in range(4) if api_store.get(f"job-{i}").status is JobStatus.PAUSED]
    assert len(paused_now) <= 2  # at most the job taken before the cancel and the one waiting for the CLI


def test_dlq_requeue_and_discard_by_filter_through_the_api_leave_discarded_jobs_alone(
        api_store: StateStore, api_url: str, tokens: dict[str, str]) -> None:
    for job_id in ("dead-1", "dead-2", "dead-gone", "dead-other"):
        ended(api_store, job_id, Event.DEAD_LETTER, queue="billing" if job_id == "dead-other" else "exports")
    check(via(api_url, tokens["admin"], "dlq", "discard", "dead-gone", "--reason", "handled by hand"))
    requeued = check(via(api_url, tokens["admin"], "dlq", "requeue", "--queue", "exports", "--reason", "r", "--yes",
                         "--json"))
    answer = json.loads(requeued.stdout)
    assert sorted(r["job_id"] for r in answer["results"]) == ["dead-1", "dead-2"] and answer["operation_id"]
    assert api_store.get("dead-gone").status is JobStatus.DEAD  # discarded: not a dead letter any more
    assert {api_store.get(j).status for j in ("dead-1", "dead-2")} == {JobStatus.PENDING}
    (op, *_) = Operations(api_store).recent()
    assert op.filter["exclude_discarded"] is True and op.operator == "ada"
    # otto operates queue exports only: billing's dead letter is not even counted (issue 38)
    nothing = check(via(api_url, tokens["operator"], "dlq", "discard", "--queue", "billing", "--reason", "r", "--yes"))
    assert "no job matches" in nothing.stderr
    assert api_store.events("dead-other")[-1].event != "command_refused"


# -- reads: the same output as the store path ----------------------------------------------------

def both(sqlite_url: str, api_url: str, token: str, *args: str, code: int = 0) -> tuple[Result, Result]:
    """`reliable ARGS` through the store and through the API."""
    return (check(run(*args, "--store", sqlite_url), code), check(via(api_url, token, *args), code))


def fill(store: StateStore) -> None:
    make(store, "job-pending")
    running(store, "job-running", checkpoint={"page": 3}, effects=2)
    paused(store, "job-paused")
    ended(store, "job-dead", Event.DEAD_LETTER)
    ended(store, "job-review", Event.NEED_REVIEW, queue="billing")


def test_jobs_list_is_the_same_through_the_api(api_store: StateStore, sqlite_url: str, api_url: str,
                                               tokens: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    fill(api_store)
    monkeypatch.setattr(api_client, "PAGE_MAX", 2)  # several pages, followed by cursor
    for args in (["jobs", "list"], ["jobs", "list", "--json"], ["jobs", "list", "--state", "dead", "--state",
                                                                "paused", "--json"],
                 ["jobs", "list", "--queue", "billing"], ["jobs", "list", "--limit", "3", "--json"]):
        by_store, by_api = both(sqlite_url, api_url, tokens["admin"], *args)
        assert by_api.stdout == by_store.stdout, args
    assert len(json.loads(by_api.stdout)) == 3


def test_jobs_show_is_the_same_through_the_api_and_prints_the_arguments(
        api_store: StateStore, sqlite_url: str, api_url: str, tokens: dict[str, str]) -> None:
    fill(api_store)
    by_store, by_api = both(sqlite_url, api_url, tokens["admin"], "jobs", "show", "job-run")
    assert by_api.stdout == by_store.stdout
    assert '["job-running"]' in by_store.stdout and "kwargs" in by_store.stdout
    by_store, by_api = both(sqlite_url, api_url, tokens["admin"], "jobs", "show", "job-dead", "--json")
    assert json.loads(by_api.stdout) == json.loads(by_store.stdout)


def test_jobs_events_is_the_same_through_the_api(api_store: StateStore, sqlite_url: str, api_url: str,
                                                 tokens: dict[str, str]) -> None:
    fill(api_store)
    for args in (["jobs", "events", "job-paused"], ["jobs", "events", "job-paused", "--json"],
                 ["jobs", "events", "job-dead", "--limit", "1", "--json"],
                 ["jobs", "events", "job-paused", "--event", "claim", "--since", "1h", "--json"],
                 ["jobs", "events", "job-paused", "--event", "resume"]):
        by_store, by_api = both(sqlite_url, api_url, tokens["admin"], *args)
        assert (by_api.stdout, by_api.stderr) == (by_store.stdout, by_store.stderr), args
    assert "its events:" in by_api.stderr


def test_dlq_and_review_are_the_same_through_the_api(api_store: StateStore, sqlite_url: str, api_url: str,
                                                     tokens: dict[str, str]) -> None:
    fill(api_store)
    for args in (["dlq", "list"], ["dlq", "list", "--json"], ["review", "list", "--queue", "billing", "--json"],
                 ["review", "list"], ["dlq", "show", "job-dead"], ["review", "show", "job-review", "--json"]):
        by_store, by_api = both(sqlite_url, api_url, tokens["admin"], *args)
        assert by_api.stdout == by_store.stdout, args
    refused = check(via(api_url, tokens["admin"], "dlq", "list", "--include-discarded"), 2)
    assert "not available through --api" in refused.stderr


def test_a_viewer_reads_through_the_api(api_store: StateStore, api_url: str, tokens: dict[str, str]) -> None:
    fill(api_store)
    listed = json.loads(check(via(api_url, tokens["viewer"], "jobs", "list", "--json")).stdout)
    assert {j["job_id"] for j in listed} >= {"job-pending", "job-dead"}


# -- set-up: token, URL, conflicting options -----------------------------------------------------

def test_no_token_says_how_to_create_one(api_url: str) -> None:
    result = check(run("jobs", "list", "--api", api_url), 2)
    assert "reliable tokens create NAME --role operator" in result.stderr
    assert "RELIABLE_API_TOKEN" in result.stderr


def test_a_wrong_token_exits_2_with_the_servers_message_and_is_never_printed(api_url: str) -> None:
    result = check(via(api_url, "rel_nope_secretvalue", "jobs", "list"), 2)
    assert "unknown, revoked or expired API token" in result.stderr
    assert "secretvalue" not in result.output


def test_token_file_must_be_private(api_store: StateStore, api_url: str, tokens: dict[str, str],
                                    tmp_path: Path) -> None:
    make(api_store, "job-1")
    path = tmp_path / "token"
    path.write_text(f"{tokens['admin']}\nsecond line ignored\n")
    path.chmod(0o644)
    refused = check(run("jobs", "list", "--api", api_url, "--token-file", str(path)), 2)
    assert "chmod 600" in refused.stderr and tokens["admin"] not in refused.output
    path.chmod(0o640)
    warned = check(run("jobs", "list", "--api", api_url, "--token-file", str(path)))
    assert "readable by its group" in warned.stderr and "job-1" in warned.stdout
    path.chmod(0o600)
    from_env = check(run("jobs", "list", "--api", api_url, env={"RELIABLE_API_TOKEN_FILE": str(path)}))
    assert from_env.stderr == "" and "job-1" in from_env.stdout


def test_store_and_api_together_is_a_usage_error(api_store: StateStore, sqlite_url: str, api_url: str,
                                                 tokens: dict[str, str]) -> None:
    make(api_store, "job-1")
    both_given = check(via(api_url, tokens["admin"], "jobs", "list", "--store", sqlite_url), 2)
    assert "not both" in both_given.stderr
    both_env = check(run("jobs", "list", env={"RELIABLE_API": api_url, "RELIABLE_STORE": sqlite_url,
                                              "RELIABLE_API_TOKEN": tokens["admin"]}), 2)
    assert "RELIABLE_STORE and RELIABLE_API" in both_env.stderr
    # One on the command line wins over the other from the environment.
    assert "job-1" in check(via(api_url, tokens["admin"], "jobs", "list", env={"RELIABLE_STORE": sqlite_url})).stdout


@pytest.mark.parametrize("option", [["--operator", "dana"], ["--operators-file", "ops.yaml"],
                                    ["--policies", "."], ["--broker", "amqp://localhost/"]])
def test_options_the_server_decides_are_refused_with_api(api_store: StateStore, api_url: str,
                                                         tokens: dict[str, str], option: list[str]) -> None:
    make(api_store, "job-1")
    result = check(via(api_url, tokens["admin"], "pause", "job-1", "--reason", "r", *option), 2)
    assert f"{option[0]} cannot be used with --api" in result.stderr
    assert api_store.get("job-1").status is JobStatus.PENDING


def test_an_unreachable_api_names_the_url_never_the_token() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the with ends: nobody listens there
    result = check(via(f"http://user:pw@127.0.0.1:{port}/ops", "rel_x_topsecret", "jobs", "list"), 2)
    assert f"cannot reach the reliable API at http://127.0.0.1:{port}/ops" in result.stderr
    assert "topsecret" not in result.output and "pw@" not in result.output


def test_help_names_the_api_variables() -> None:
    for args in (["pause"], ["jobs", "list"], ["dlq", "list"]):
        text = check(run(*args, "--help")).stdout
        for name in ("--api", "RELIABLE_API", "RELIABLE_API_TOKEN", "RELIABLE_API_TOKEN_FILE", "--token-file"):
            assert name in text, (args, name)


def test_the_real_executable_through_the_api(api_store: StateStore, api_url: str, tokens: dict[str, str]) -> None:
    import subprocess

    make(api_store, "job-1")
    env: dict[str, Any] = {k: v for k, v in os.environ.items() if not k.startswith("RELIABLE_")}
    env.update({"RELIABLE_API": api_url, "RELIABLE_API_TOKEN": tokens["operator"]})
    proc = subprocess.run([RELIABLE, "cancel", "job-1", "--reason", "customer withdrew"], capture_output=True,
                          text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "cancel job-1: moved to CANCELLED\n"
    assert api_store.events("job-1")[-1].operator == "otto"
