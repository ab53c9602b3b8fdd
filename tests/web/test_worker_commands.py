"""Issue 42, item 1: quieting and stopping a worker process from the API and the console, on SQLite and
PostgreSQL: who may (the operators policy, on every queue of the process), the reason, the audit trail,
a process that exited (409) or is unknown (404), and the heartbeat's report picking the command up.
A live process receives it in tests/supervisor/test_process_commands.py."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from reliable.store import StateStore
from reliable.store.process_commands import list_events, report
from reliable.store.processes import WorkerProcess, get_process, mark_exited, register_process
from reliable.web import WebConfig, create_app

from web_support import Tokens, bearer, csrf_of, session


def _register(store: StateStore, worker_id: str, queues: tuple[str, ...] | None) -> None:
    register_process(store, WorkerProcess(worker_id=worker_id, host="h", pid=7, start_ticks=1, boot_id="b",
                                          queues=queues, threads=2, supervisor_pid=None))


@pytest.fixture
def app_client(store: StateStore) -> TestClient:
    _register(store, "w-billing", ("billing",))
    _register(store, "w-all", None)
    _register(store, "w-gone", ("billing",))
    assert mark_exited(store, "w-gone", reason="stopped", observed_by="w-gone")
    return TestClient(create_app(store, config=WebConfig(secret_key="s")))


def test_quiet_then_stop_is_audited_and_picked_up_by_the_heartbeat(store: StateStore, tokens: Tokens,
                                                                    app_client: TestClient) -> None:
    admin = bearer(tokens.admin)
    with app_client as client:
        quiet = client.post("/api/v1/workers/w-billing/quiet", json={"reason": "draining host h"}, headers=admin)
        again = client.post("/api/v1/workers/w-billing/quiet", json={"reason": "twice"}, headers=admin)
        listed = client.get("/api/v1/workers", headers=admin).json()
    assert quiet.status_code == 200, quiet.text
    assert quiet.json() == {"worker_id": "w-billing", "command": "quiet", "changed": True, "operator": "ada"}
    assert again.json()["changed"] is False
    row = next(w for w in listed["workers"] if w["worker_id"] == "w-billing")
    assert row["quiet"] and row["command"] == "quiet" and row["command_reason"] == "draining host h"
    assert row["command_operator"] == "ada" and row["command_seen_at"] is None

    assert report(store, "w-billing", []) == "quiet"  # the process's next heartbeat
    seen = get_process(store, "w-billing")
    assert seen is not None and seen.command_seen_at is not None and seen.busy == ()
    with app_client as client:
        stop = client.post("/api/v1/workers/w-billing/stop", json={"reason": "host h goes away"}, headers=admin)
        back = client.post("/api/v1/workers/w-billing/quiet", json={"reason": "no: a stop stays"}, headers=admin)
    assert stop.json()["changed"] is True and back.json()["changed"] is False
    assert report(store, "w-billing", None) == "stop"
    assert [(e.event, e.operator, e.reason, e.source) for e in list_events(store, "w-billing")] == [
        ("quiet", "ada", "draining host h", "api:token"), ("stop", "ada", "host h goes away", "api:token")]


def test_who_may_quiet_or_stop(store: StateStore, tokens: Tokens, app_client: TestClient) -> None:
    with app_client as client:
        viewer = client.post("/api/v1/workers/w-billing/stop", json={"reason": "r"}, headers=bearer(tokens.viewer))
        # the operator's scope is queue billing: a process of billing, not one consuming every queue
        mine = client.post("/api/v1/workers/w-billing/quiet", json={"reason": "r"}, headers=bearer(tokens.operator))
        every = client.post("/api/v1/workers/w-all/quiet", json={"reason": "r"}, headers=bearer(tokens.operator))
    assert viewer.status_code == 403 and mine.status_code == 200 and every.status_code == 403, every.text
    assert "may not pause jobs on queue '*'" in every.json()["error"]["message"]
    refused = [(e.event, e.operator, e.detail["command"]) for e in list_events(store, "w-all")]
    assert refused == [("command_refused", "otto", "workers quiet")]
    assert (get_process(store, "w-all") or pytest.fail("no record")).command is None


def test_an_exited_or_unknown_process_and_bad_input(store: StateStore, tokens: Tokens,
                                                    app_client: TestClient) -> None:
    admin = bearer(tokens.admin)
    with app_client as client:
        gone = client.post("/api/v1/workers/w-gone/stop", json={"reason": "r"}, headers=admin)
        unknown = client.post("/api/v1/workers/w-nobody/stop", json={"reason": "r"}, headers=admin)
        no_reason = client.post("/api/v1/workers/w-billing/stop", json={}, headers=admin)
        bad_verb = client.post("/api/v1/workers/w-billing/kill", json={"reason": "r"}, headers=admin)
        extra = client.post("/api/v1/workers/w-billing/stop", json={"reason": "r", "now": True}, headers=admin)
    assert gone.status_code == 409, gone.text
    assert "worker process w-gone (pid 7 on h) has exited" in gone.json()["error"]["message"]
    assert unknown.status_code == 404 and "'w-nobody'" in unknown.json()["error"]["message"]
    assert no_reason.status_code == 400 and "reason" in no_reason.json()["error"]["message"]
    assert bad_verb.status_code == 404 and extra.status_code == 400
    assert all(get_process(store, w).command is None for w in ("w-gone", "w-billing"))  # type: ignore[union-attr]
    assert list_events(store, "w-gone") == [] and list_events(store, "w-billing") == []


def test_the_workers_page_quiets_and_stops(store: StateStore, tokens: Tokens, app_client: TestClient) -> None:
    app_client.close()
    client, csrf = session(store, tokens.admin)
    with client:
        page = client.get("/workers").text
        assert 'action="http://testserver/workers/w-billing/actions/quiet"' in page
        done = client.post("/workers/w-billing/actions/quiet", data={"reason": "drain", "csrf_token": csrf})
        assert done.status_code == 200 and "told to take no new message" in done.text
        row = done.text.split('data-worker="w-billing"')[1].split("</tr>")[0]
        assert "quiet" in row and "drain" in row and "not picked up yet" in row and ">Stop</button>" in row
        assert ">Quiet</button>" not in row
        gone = client.post("/workers/w-gone/actions/stop", data={"reason": "late", "csrf_token": csrf})
        assert "stop of worker w-gone refused: worker process w-gone (pid 7 on h) has exited" in gone.text
    viewer, _ = session(store, tokens.viewer)
    with viewer:
        assert "/actions/" not in viewer.get("/workers").text
        html = viewer.get("/workers").text
        assert csrf_of(html)


def test_resume_takes_a_quiet_off_audited(store: StateStore, tokens: Tokens, app_client: TestClient) -> None:
    admin = bearer(tokens.admin)
    with app_client as client:
        not_quiet = client.post("/api/v1/workers/w-billing/resume", json={"reason": "too early"}, headers=admin)
        client.post("/api/v1/workers/w-billing/quiet", json={"reason": "drain"}, headers=admin)
        assert report(store, "w-billing", []) == "quiet"
        resumed = client.post("/api/v1/workers/w-billing/resume", json={"reason": "host kept"}, headers=admin)
        again = client.post("/api/v1/workers/w-billing/resume", json={"reason": "twice"}, headers=admin)
        listed = client.get("/api/v1/workers", headers=admin).json()
    assert not_quiet.status_code == 409, not_quiet.text
    assert "worker process w-billing (pid 7 on h) is not quiet: nothing to resume" in \
        not_quiet.json()["error"]["message"]
    assert resumed.status_code == 200, resumed.text
    assert resumed.json() == {"worker_id": "w-billing", "command": "resume", "changed": True, "operator": "ada"}
    assert again.status_code == 409 and "is not quiet" in again.json()["error"]["message"]
    row = next(w for w in listed["workers"] if w["worker_id"] == "w-billing")
    assert not row["quiet"] and row["command"] is None
    assert report(store, "w-billing", None) is None  # the next heartbeat reads no command: it takes messages
    assert [(e.event, e.operator, e.reason) for e in list_events(store, "w-billing")] == [
        ("quiet", "ada", "drain"), ("resume", "ada", "host kept")]


def test_resume_refused_for_a_stopping_exited_or_unknown_process(store: StateStore, tokens: Tokens,
                                                                 app_client: TestClient) -> None:
    admin = bearer(tokens.admin)
    with app_client as client:
        client.post("/api/v1/workers/w-all/quiet", json={"reason": "drain"}, headers=admin)
        client.post("/api/v1/workers/w-all/stop", json={"reason": "retire"}, headers=admin)
        stopping = client.post("/api/v1/workers/w-all/resume", json={"reason": "no"}, headers=admin)
        gone = client.post("/api/v1/workers/w-gone/resume", json={"reason": "r"}, headers=admin)
        unknown = client.post("/api/v1/workers/w-nobody/resume", json={"reason": "r"}, headers=admin)
        no_reason = client.post("/api/v1/workers/w-all/resume", json={}, headers=admin)
    assert stopping.status_code == 409, stopping.text
    assert "is stopping, not quiet: a stop is not taken back" in stopping.json()["error"]["message"]
    assert gone.status_code == 409 and "has exited" in gone.json()["error"]["message"]
    assert unknown.status_code == 404 and no_reason.status_code == 400
    assert (get_process(store, "w-all") or pytest.fail("no record")).command == "stop"
    assert [e.event for e in list_events(store, "w-all")] == ["quiet", "stop"]


def test_who_may_resume(store: StateStore, tokens: Tokens, app_client: TestClient) -> None:
    admin = bearer(tokens.admin)
    with app_client as client:
        for worker in ("w-billing", "w-all"):
            client.post(f"/api/v1/workers/{worker}/quiet", json={"reason": "drain"}, headers=admin)
        viewer = client.post("/api/v1/workers/w-billing/resume", json={"reason": "r"}, headers=bearer(tokens.viewer))
        mine = client.post("/api/v1/workers/w-billing/resume", json={"reason": "r"}, headers=bearer(tokens.operator))
        every = client.post("/api/v1/workers/w-all/resume", json={"reason": "r"}, headers=bearer(tokens.operator))
    assert viewer.status_code == 403 and mine.status_code == 200 and every.status_code == 403, every.text
    assert "may not resume jobs on queue '*'" in every.json()["error"]["message"]
    assert [(e.event, e.detail.get("command")) for e in list_events(store, "w-all")] == [
        ("quiet", None), ("command_refused", "workers resume")]
    assert (get_process(store, "w-all") or pytest.fail("no record")).command == "quiet"


def test_the_workers_page_resumes_a_quiet_process(store: StateStore, tokens: Tokens, app_client: TestClient) -> None:
    app_client.close()
    client, csrf = session(store, tokens.admin)
    with client:
        assert ">Resume</button>" not in client.get("/workers").text  # nothing quiet
        client.post("/workers/w-billing/actions/quiet", data={"reason": "drain", "csrf_token": csrf})
        row = client.get("/workers").text.split('data-worker="w-billing"')[1].split("</tr>")[0]
        assert ">Resume</button>" in row and ">Stop</button>" in row and ">Quiet</button>" not in row
        done = client.post("/workers/w-billing/actions/resume", data={"reason": "kept", "csrf_token": csrf})
        assert "worker w-billing resumed: it takes messages again" in done.text
        row = done.text.split('data-worker="w-billing"')[1].split("</tr>")[0]
        assert ">Quiet</button>" in row and ">Resume</button>" not in row
        refused = client.post("/workers/w-billing/actions/resume", data={"reason": "again", "csrf_token": csrf})
        assert "resume of worker w-billing refused: worker process w-billing (pid 7 on h) is not quiet" in refused.text
