"""Commands through the API on both databases: who may act, what is audited under whose name, and how
refusals, bad bodies and unknown commands answer."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

from reliable.states import Event
from reliable.store import ErrorInfo, JobEvent, NewJob, StateStore
from reliable.web import WebConfig, create_app

from web_support import Tokens, bearer

COMMANDS = ("pause", "stop", "cancel", "resume", "restart", "requeue", "retry", "reconcile", "discard")


def make(store: StateStore, job_id: str, *, queue: str = "billing") -> None:
    """A PENDING job."""
    store.register(NewJob(job_id, queue, "charge", {"args": [job_id], "kwargs": {}, "options": {}}))


def ended(store: StateStore, job_id: str, event: Event, *, queue: str = "billing") -> None:
    """A job that ran once and ended with `event`."""
    make(store, job_id, queue=queue)
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    store.finish(job_id, claim.lease_id, event, worker_id="w1", error=ErrorInfo("permanent", "ValueError", "x"))


def body_for(command: str, **extra: Any) -> dict[str, Any]:
    return {"reason": "api test", **({"resolution": "succeeded"} if command == "reconcile" else {}), **extra}


def post(client: TestClient, token: str | None, job_id: str, command: str, body: Any = None) -> Any:
    return client.post(f"/api/v1/jobs/{job_id}/{command}", json=body_for(command) if body is None else body,
                       headers=bearer(token) if token else {})


def last(store: StateStore, job_id: str) -> JobEvent:
    return store.events(job_id)[-1]


def test_every_command_needs_a_token(client: TestClient, store: StateStore) -> None:
    make(store, "job-1")
    for command in COMMANDS:
        response = post(client, None, "job-1", command)
        assert response.status_code == 401, command
    assert [e.event for e in store.events("job-1")] == ["enqueued"]


def test_a_read_only_token_cannot_act_and_each_refusal_is_audited_under_its_name(
        client: TestClient, store: StateStore, tokens: Tokens) -> None:
    make(store, "job-1")
    for command in COMMANDS:
        response = post(client, tokens.viewer, "job-1", command)
        assert response.status_code == 403, (command, response.text)
        assert response.json()["error"]["type"] == "NotAuthorized"
        event = last(store, "job-1")
        assert (event.event, event.operator, event.reason) == ("command_refused", "vera", "api test")
        assert event.detail["source"] == "api:token"
        assert event.detail["command"] == ("requeue" if command == "retry" else command)
    assert store.get("job-1").status.value == "PENDING"


def test_an_operator_acts_on_its_queue_only(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    make(store, "bill-1", queue="billing")
    make(store, "exp-1", queue="exports")
    response = post(client, tokens.operator, "bill-1", "pause")
    assert response.status_code == 200, response.text
    assert response.json()["outcome"] == "done" and response.json()["status"] == "PAUSED"
    event = last(store, "bill-1")
    assert (event.event, event.operator, event.detail["source"]) == ("pause", "otto", "api:token")

    refused = post(client, tokens.operator, "exp-1", "pause")
    assert refused.status_code == 403 and "otto" in refused.json()["error"]["message"]
    event = last(store, "exp-1")
    assert (event.event, event.operator, event.detail["source"]) == ("command_refused", "otto", "api:token")
    assert store.get("exp-1").status.value == "PENDING"


def test_an_admin_acts_anywhere_audited_as_the_token_name(client: TestClient, store: StateStore,
                                                          tokens: Tokens) -> None:
    make(store, "exp-1", queue="exports")
    response = post(client, tokens.admin, "exp-1", "cancel", {"reason": "customer asked"})
    assert response.status_code == 200, response.text
    result = response.json()
    assert (result["command"], result["outcome"], result["status_before"], result["status"]) == (
        "cancel", "done", "PENDING", "CANCELLED")
    event = last(store, "exp-1")
    assert (event.event, event.operator, event.reason) == ("cancel", "ada", "customer asked")
    assert event.detail["source"] == "api:token" and event.host


def test_the_audited_name_cannot_be_chosen_in_the_body(client: TestClient, store: StateStore,
                                                       tokens: Tokens) -> None:
    make(store, "job-1")
    response = post(client, tokens.admin, "job-1", "pause", {"reason": "x", "operator": "mallory"})
    assert response.status_code == 400 and "'operator'" in response.json()["error"]["message"]
    assert [e.event for e in store.events("job-1")] == ["enqueued"]


def test_retry_is_requeue_and_reconcile_takes_a_resolution(client: TestClient, store: StateStore,
                                                           tokens: Tokens) -> None:
    ended(store, "dead-1", Event.DEAD_LETTER)
    ended(store, "review-1", Event.NEED_REVIEW)
    retried = post(client, tokens.operator, "dead-1", "retry").json()
    assert (retried["command"], retried["event"], retried["status"]) == ("requeue", "requeue", "PENDING")
    missing = post(client, tokens.operator, "review-1", "reconcile", {"reason": "checked"})
    assert missing.status_code == 400 and "'resolution'" in missing.json()["error"]["message"]
    done = post(client, tokens.operator, "review-1", "reconcile", {"reason": "checked", "resolution": "cancelled"})
    assert done.status_code == 200 and done.json()["status"] == "CANCELLED"
    event = last(store, "review-1")
    assert event.operator == "otto" and event.detail["resolution"] == "cancelled"


def test_dry_run_writes_nothing(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    make(store, "job-1")
    result = post(client, tokens.admin, "job-1", "stop", {"reason": "x", "dry_run": True}).json()
    assert result["outcome"] == "dry_run" and "STOPPED" in result["message"]
    preview = post(client, tokens.viewer, "job-1", "stop", {"reason": "x", "dry_run": True})
    assert preview.status_code == 200 and preview.json()["outcome"] == "refused"
    assert [e.event for e in store.events("job-1")] == ["enqueued"]
    assert store.get("job-1").status.value == "PENDING"


def test_a_refusal_by_state_is_409_and_audited(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    ended(store, "dead-1", Event.DEAD_LETTER)
    response = post(client, tokens.admin, "dead-1", "pause")
    assert response.status_code == 409, response.text
    assert "cannot pause a DEAD job" in response.json()["error"]["message"]
    event = last(store, "dead-1")
    assert (event.event, event.operator, event.detail["command"]) == ("command_refused", "ada", "pause")


def test_discard_through_the_api_takes_a_job_out_of_the_dlq(client: TestClient, store: StateStore,
                                                            tokens: Tokens) -> None:
    ended(store, "dead-1", Event.DEAD_LETTER)
    assert post(client, tokens.operator, "dead-1", "discard").json()["outcome"] == "done"
    assert client.get("/api/v1/dlq", headers=bearer(tokens.viewer)).json()["jobs"] == []
    event = last(store, "dead-1")
    assert (event.event, event.operator, event.detail["source"]) == ("discarded", "otto", "api:token")


@pytest.mark.parametrize(("body", "field"), [
    ({}, "reason"),
    ({"reason": "  "}, "reason"),
    ({"reason": 5}, "'reason'"),
    ({"reason": "x", "dry_run": "yes"}, "'dry_run'"),
    ({"reason": "x", "allow_duplicate_side_effects": True}, "'allow_duplicate_side_effects'"),
    ({"reason": "x", "resolution": "succeeded"}, "'resolution'"),
])
def test_bad_bodies_are_400_and_write_nothing(client: TestClient, store: StateStore, tokens: Tokens,
                                              body: dict[str, Any], field: str) -> None:
    make(store, "job-1")
    response = post(client, tokens.admin, "job-1", "pause", body)
    assert response.status_code == 400, response.text
    assert field in response.json()["error"]["message"]
    assert [e.event for e in store.events("job-1")] == ["enqueued"]


def test_a_missing_reason_is_400_before_the_job_is_looked_up(client: TestClient, tokens: Tokens) -> None:
    response = post(client, tokens.admin, "no-such-job", "cancel", {})
    assert response.status_code == 400 and response.json()["error"]["type"] == "ReasonRequired"


def test_non_json_bodies_unknown_commands_and_jobs(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    make(store, "job-1")
    for raw in (b"reason=x", b"[1, 2]", b"\xff\xfe", b"null"):
        response = client.post("/api/v1/jobs/job-1/pause", content=raw, headers=bearer(tokens.admin))
        assert response.status_code == 400, raw
        assert "JSON object" in response.json()["error"]["message"]
    form = client.post("/api/v1/jobs/job-1/pause", data={"reason": "x"}, headers=bearer(tokens.admin))
    assert form.status_code == 400 and "JSON object" in form.json()["error"]["message"]
    unknown = post(client, tokens.admin, "job-1", "explode")
    assert unknown.status_code == 404 and "explode" in unknown.json()["error"]["message"]
    assert post(client, tokens.admin, "no-such-job", "pause").status_code == 404
    assert client.get("/api/v1/jobs/job-1/pause", headers=bearer(tokens.admin)).status_code == 405
    assert [e.event for e in store.events("job-1")] == ["enqueued"]


def test_a_console_session_acts_with_its_csrf_token_audited_as_a_session(store: StateStore,
                                                                         tokens: Tokens) -> None:
    make(store, "job-1")
    client = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    login = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
    assert login is not None
    client.post("/login", data={"token": tokens.operator, "csrf_token": login.group(1)}, follow_redirects=False)
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)"', client.get("/").text)
    assert csrf is not None
    assert client.post("/api/v1/jobs/job-1/pause", json={"reason": "x"}).status_code == 403  # no CSRF token
    form = client.post("/api/v1/jobs/job-1/pause", data={"reason": "x", "csrf_token": csrf.group(1)})
    assert form.status_code == 400 and "JSON object" in form.json()["error"]["message"]
    response = client.post("/api/v1/jobs/job-1/pause", json={"reason": "from the console"},
                           headers={"X-CSRF-Token": csrf.group(1)})
    assert response.status_code == 200, response.text
    event = last(store, "job-1")
    assert (event.event, event.operator, event.detail["source"]) == ("pause", "otto", "api:session")
