"""Pausing a queue through the API and the console on both databases: who may pause which queue,
what is audited (refusals too), the figures of GET /api/v1/queues, OpenAPI, and the banner."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from starlette.testclient import TestClient

from reliable import queue_pauses
from reliable.store import NewJob, StateStore
from reliable.web import WebConfig, create_app

from web_support import Tokens, bearer, session


def _post(client: TestClient, token: str, queue: str, command: str, reason: str | None = "api test") -> Any:
    body = {} if reason is None else {"reason": reason}
    return client.post(f"/api/v1/queues/{queue}/{command}", json=body, headers=bearer(token))


def conforms(doc: dict[str, Any], schema: str, value: Any) -> None:
    """Validate `value` against components/schemas/`schema` of `doc` (as test_api_openapi.py does)."""
    root = {"$ref": f"#/components/schemas/{schema}", "components": doc["components"]}
    jsonschema.Draft202012Validator(root).validate(value)


def _events(store: StateStore, queue: str) -> list[tuple[str, str | None, str | None]]:
    return [(e.event, e.operator, e.reason) for e in queue_pauses.events(store, queue)]


def test_a_viewer_reads_the_queues_and_may_not_pause_its_refusal_audited(
        client: TestClient, store: StateStore, tokens: Tokens) -> None:
    store.register(NewJob("job-1", "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    listed = client.get("/api/v1/queues", headers=bearer(tokens.viewer))
    assert listed.status_code == 200
    (row,) = listed.json()["queues"]
    assert row["queue"] == "billing" and row["by_state"] == {"PENDING": 1} and row["paused"] is None
    refused = _post(client, tokens.viewer, "billing", "pause")
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["type"] == "NotAuthorized"
    assert queue_pauses.paused(store).pauses == ()
    (event,) = queue_pauses.events(store, "billing")
    assert (event.event, event.operator, event.reason) == ("command_refused", "vera", "api test")
    assert event.detail["command"] == "queues pause" and "may not pause" in event.detail["why"]
    assert event.source == "api:token"


def test_a_scoped_operator_pauses_only_its_queues(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    done = _post(client, tokens.operator, "billing", "pause")
    assert done.status_code == 200, done.text
    assert done.json() == {"queue": "billing", "command": "pause", "changed": True, "paused": True,
                           "operator": "otto"}
    outside = _post(client, tokens.operator, "exports", "pause")
    assert outside.status_code == 403
    assert queue_pauses.paused(store).names == {"billing"}
    assert _events(store, "exports") == [("command_refused", "otto", "api test")]
    again = _post(client, tokens.operator, "billing", "pause", "twice")
    assert again.status_code == 200 and again.json()["changed"] is False  # the first pause and reason stay
    pause = queue_pauses.paused(store).get("billing")
    assert pause is not None and (pause.operator, pause.reason) == ("otto", "api test")
    resumed = _post(client, tokens.operator, "billing", "resume", "fixed")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert _events(store, "billing") == [("pause", "otto", "api test"), ("resume", "otto", "fixed")]
    assert _post(client, tokens.operator, "billing", "resume", "again").json()["changed"] is False


def test_the_figures_show_a_pause_and_a_paused_queue_without_jobs(
        client: TestClient, store: StateStore, tokens: Tokens) -> None:
    assert _post(client, tokens.admin, "empty-queue", "pause").status_code == 200
    rows = {r["queue"]: r for r in client.get("/api/v1/queues", headers=bearer(tokens.viewer)).json()["queues"]}
    paused = rows["empty-queue"]["paused"]
    assert paused["operator"] == "ada" and paused["reason"] == "api test" and paused["paused_seconds"] >= 0
    assert rows["empty-queue"]["by_state"] == {} and rows["empty-queue"]["failure_rate"] is None


@pytest.mark.parametrize("body, problem", [
    ({}, "needs a reason"), ({"reason": "  "}, "needs a reason"), ({"reason": 3}, "must be a string"),
    ({"reason": "x", "why": 1}, "unknown field 'why'"), ({"reason": "bad\x00"}, "control characters")])
def test_bad_bodies_are_refused_naming_the_field(client: TestClient, store: StateStore, tokens: Tokens,
                                                  body: dict[str, object], problem: str) -> None:
    response = client.post("/api/v1/queues/billing/pause", json=body, headers=bearer(tokens.admin))
    assert response.status_code == 400, response.text
    assert problem in response.json()["error"]["message"]
    assert queue_pauses.paused(store).pauses == ()


def test_a_queue_whose_name_holds_a_slash_is_paused_and_resumed_by_its_encoded_name(
        client: TestClient, store: StateStore, tokens: Tokens) -> None:
    """The queue is one path segment: `a/b` is reached as `a%2Fb` (the CLI quotes it so)."""
    paused = client.post("/api/v1/queues/a%2Fb/pause", json={"reason": "x"}, headers=bearer(tokens.admin))
    assert paused.status_code == 200, paused.text
    assert [p.queue for p in queue_pauses.paused(store).pauses] == ["a/b"]
    resumed = client.post("/api/v1/queues/a%2Fb/resume", json={"reason": "x"}, headers=bearer(tokens.admin))
    assert resumed.status_code == 200 and queue_pauses.paused(store).pauses == ()


def test_unknown_command_and_missing_token(client: TestClient, tokens: Tokens) -> None:
    assert client.post("/api/v1/queues/billing/drain", json={"reason": "x"},
                       headers=bearer(tokens.admin)).status_code == 404
    assert client.post("/api/v1/queues/billing/pause", json={"reason": "x"}).status_code == 401
    assert client.get("/api/v1/queues").status_code == 401


def test_openapi_covers_the_queue_routes_and_the_answers_match(client: TestClient, store: StateStore,
                                                                tokens: Tokens) -> None:
    doc = client.get("/api/v1/openapi.json", headers=bearer(tokens.viewer)).json()
    store.register(NewJob("job-1", "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    conforms(doc, "QueueCommandResult", _post(client, tokens.admin, "billing", "pause").json())
    conforms(doc, "QueueList", client.get("/api/v1/queues", headers=bearer(tokens.viewer)).json())
    conforms(doc, "Error", _post(client, tokens.viewer, "billing", "resume").json())
    for command in ("pause", "resume"):
        post = doc["paths"][f"/api/v1/queues/{{queue}}/{command}"]["post"]
        assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("QueueCommandRequest")
        assert "403" in post["responses"]
    assert "paused" in doc["components"]["schemas"]["Queue"]["properties"]


def test_the_console_pauses_and_resumes_and_every_page_shows_the_banner(store: StateStore, tokens: Tokens) -> None:
    store.register(NewJob("job-1", "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    client, csrf = session(store, tokens.operator)  # after: the overview's figures are reused for 5 s
    page = client.get("/queues")
    assert page.status_code == 200 and '/queues/billing/actions">Pause' in page.text  # a link per row
    actions = client.get("/queues/billing/actions").text  # the queue's page carries the form
    assert '/queues/billing/actions/pause"' in actions and 'name="csrf_token"' in actions
    done = client.post("/queues/billing/actions/pause", data={"reason": "downstream outage", "csrf_token": csrf},
                       follow_redirects=False)
    assert done.status_code == 303
    for path in ("/", "/jobs", "/queues", "/operations"):
        text = client.get(path).text
        assert "banner-paused" in text and "downstream outage" in text, path
    assert '/queues/billing/actions">Resume' in client.get("/queues").text
    assert '/queues/billing/actions/resume"' in client.get("/queues/billing/actions").text
    client.post("/queues/billing/actions/resume", data={"reason": "back", "csrf_token": csrf})
    assert "banner-paused" not in client.get("/jobs").text
    assert _events(store, "billing") == [("pause", "otto", "downstream outage"), ("resume", "otto", "back")]


def test_the_console_refuses_a_queue_outside_the_scope_and_offers_no_form(store: StateStore, tokens: Tokens) -> None:
    store.register(NewJob("job-1", "exports", "export", {"args": [], "kwargs": {}, "options": {}}))
    client, csrf = session(store, tokens.operator)
    assert "/queues/exports/actions" not in client.get("/queues").text
    assert "/queues/exports/actions/" not in client.get("/queues/exports/actions").text  # no form there either
    refused = client.post("/queues/exports/actions/pause", data={"reason": "x", "csrf_token": csrf})
    assert refused.status_code == 403
    assert _events(store, "exports") == [("command_refused", "otto", "x")]


def test_with_a_broker_each_queue_shows_its_rabbitmq_depths(store: StateStore, tokens: Tokens, rabbitmq_url: str,
                                                            queue_name: str) -> None:
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    broker = RabbitmqBroker(url=rabbitmq_url)
    try:
        broker.enqueue(dramatiq.Message(queue_name=queue_name, actor_name="charge", args=(), kwargs={}, options={}))
        for queue in (queue_name, "not-in-rabbitmq"):
            store.register(NewJob(f"job-{queue}", queue, "charge", {"args": [], "kwargs": {}, "options": {}}))
        with TestClient(create_app(store, broker=broker, config=WebConfig(secret_key="s"))) as client:
            answer = client.get("/api/v1/queues", headers=bearer(tokens.viewer)).json()
        rows = {r["queue"]: r for r in answer["queues"]}
        assert rows[queue_name]["broker"] == {"ready": 1, "delayed": 0, "dead": 0, "consumers": 0}
        assert rows["not-in-rabbitmq"]["broker"] is None
    finally:
        broker.close()
