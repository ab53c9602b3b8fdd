"""`reliable workers list|quiet|resume|stop` through the store and through the API (`--api`): the same
answers, the busy threads listed, the operators policy applied on both paths (refusals audited on the
process), and the exit statuses of `reliable queues pause|resume` (tests/control/test_queues_cli.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'reliable[web]')")


from control_helpers import check, run, via

from reliable.access import ApiTokens
from reliable.store import NewJob, StateStore
from reliable.store.process_commands import list_events, report
from reliable.store.processes import WorkerProcess, get_process, mark_exited, register_process
from reliable.web import WebConfig, create_app

from cli_api_server import serve


@pytest.fixture
def api_store(sqlite_url: str) -> Iterator[StateStore]:
    store = StateStore(sqlite_url)
    for worker_id, queues in (("w-exports", ("exports",)), ("w-all", None), ("w-gone", ("exports",))):
        register_process(store, WorkerProcess(worker_id=worker_id, host="h", pid=7, start_ticks=1, boot_id="b",
                                              queues=queues, threads=2, supervisor_pid=None))
    assert mark_exited(store, "w-gone", reason="stopped", observed_by="w-gone")
    yield store
    store.close()


@pytest.fixture
def api_url(api_store: StateStore) -> Iterator[str]:
    with serve(create_app(api_store, config=WebConfig(secret_key="t"))) as url:
        yield url


@pytest.fixture
def tokens(api_store: StateStore) -> dict[str, str]:
    made = ApiTokens(api_store)
    return {"viewer": made.create("vera", "viewer")[1],
            "operator": made.create("otto", "operator", queues=["exports"])[1]}




def _command(store: StateStore, worker_id: str) -> str | None:
    return (get_process(store, worker_id) or pytest.fail(f"{worker_id} not on record")).command


def test_list_shows_the_busy_threads_and_the_command(api_store: StateStore, sqlite_url: str, api_url: str,
                                                     tokens: dict[str, str]) -> None:
    api_store.register(NewJob("job-busy", "exports", "export", {"args": [], "kwargs": {}, "options": {}}))
    assert api_store.claim("job-busy", worker_id="w-exports", lease_ttl=60) is not None
    report(api_store, "w-exports", [("job-busy", "Thread-3")])
    check(run("workers", "quiet", "w-exports", "--reason", "drain", "--store", sqlite_url))
    out = check(run("workers", "list", "--store", sqlite_url)).stdout
    line = next(line for line in out.splitlines() if "w-exports" in line)
    assert "Thread-3: job-busy (export)" in line and "quiet by carol: drain (not picked up yet)" in line
    by_store = json.loads(check(run("workers", "list", "--json", "--store", sqlite_url)).stdout)
    by_api = json.loads(check(via(api_url, tokens["viewer"], "workers", "list", "--json")).stdout)
    for rows in (by_store, by_api):
        row = next(r for r in rows if r["worker_id"] == "w-exports")
        assert [(t["thread"], t["job_id"]) for t in row["busy_threads"]] == [("Thread-3", "job-busy")]
        assert row["command"] == "quiet" and row["quiet"]


def test_quiet_resume_stop_through_the_store(api_store: StateStore, sqlite_url: str) -> None:
    assert "needs a reason" in check(run("workers", "quiet", "w-exports", "--store", sqlite_url), 2).stderr
    out = check(run("workers", "quiet", "w-exports", "--reason", "drain", "--store", sqlite_url)).stdout
    assert out == "quieted worker w-exports as carol (seen within a heartbeat)\n"
    again = check(run("workers", "quiet", "w-exports", "--reason", "twice", "--store", sqlite_url), 1)
    assert "already told to quiet" in again.stderr
    resumed = check(run("workers", "resume", "w-exports", "--reason", "kept", "--json", "--store", sqlite_url))
    assert json.loads(resumed.stdout) == {"worker_id": "w-exports", "command": "resume", "changed": True,
                                          "operator": "carol"}
    not_quiet = check(run("workers", "resume", "w-exports", "--reason", "again", "--store", sqlite_url), 1)
    assert "is not quiet: nothing to resume" in not_quiet.stderr
    check(run("workers", "stop", "w-exports", "--reason", "retire", "--store", sqlite_url))
    assert "is stopping, not quiet" in check(run("workers", "resume", "w-exports", "--reason", "no", "--store",
                                                 sqlite_url), 1).stderr
    assert "has exited" in check(run("workers", "stop", "w-gone", "--reason", "r", "--store", sqlite_url), 1).stderr
    assert "w-nobody" in check(run("workers", "stop", "w-nobody", "--reason", "r", "--store", sqlite_url), 2).stderr
    assert _command(api_store, "w-exports") == "stop"
    assert [(e.event, e.operator, e.reason) for e in list_events(api_store, "w-exports")] == [
        ("quiet", "carol", "drain"), ("resume", "carol", "kept"), ("stop", "carol", "retire")]


def test_an_operators_file_refuses_a_process_outside_the_scope_audited(api_store: StateStore, sqlite_url: str,
                                                                         tmp_path: Path) -> None:
    policy = tmp_path / "operators.yaml"
    policy.write_text('operators:\n  carol: [operator]\nroles:\n  operator:\n'
                      '    - {commands: [pause, resume], queues: [exports]}\n')
    refused = check(run("workers", "quiet", "w-all", "--reason", "r", "--store", sqlite_url, "--operators-file",
                        str(policy)), 1)
    assert "may not pause jobs on queue '*'" in refused.stderr
    check(run("workers", "quiet", "w-exports", "--reason", "r", "--store", sqlite_url, "--operators-file", str(policy)))
    check(run("workers", "resume", "w-exports", "--reason", "r", "--store", sqlite_url, "--operators-file",
              str(policy)))
    check(run("workers", "stop", "w-exports", "--reason", "r", "--store", sqlite_url, "--operators-file",
              str(policy)), 1)
    assert _command(api_store, "w-all") is None and _command(api_store, "w-exports") is None
    assert [(e.event, e.operator) for e in list_events(api_store, "w-all")] == [("command_refused", "carol")]


def test_the_api_path_acts_as_the_token_and_refuses_outside_its_scope(api_store: StateStore, api_url: str,
                                                                       tokens: dict[str, str]) -> None:
    by_api = check(via(api_url, tokens["operator"], "workers", "quiet", "w-exports", "--reason", "maintenance"))
    assert by_api.stdout == "quieted worker w-exports as otto (seen within a heartbeat)\n"
    assert "may not pause" in check(via(api_url, tokens["operator"], "workers", "quiet", "w-all", "--reason", "m"),
                                    1).stderr
    check(via(api_url, tokens["viewer"], "workers", "resume", "w-exports", "--reason", "m"), 1)
    check(via(api_url, tokens["operator"], "workers", "resume", "w-exports", "--reason", "done"))
    assert "is not quiet" in check(via(api_url, tokens["operator"], "workers", "resume", "w-exports", "--reason",
                                       "again"), 1).stderr
    assert "has exited" in check(via(api_url, tokens["operator"], "workers", "stop", "w-gone", "--reason", "r"),
                                 1).stderr
    check(via(api_url, tokens["operator"], "workers", "stop", "w-nobody", "--reason", "r"), 2)
    assert [(e.event, e.operator) for e in list_events(api_store, "w-exports")] == [
        ("quiet", "otto"), ("command_refused", "vera"), ("resume", "otto")]
