"""The API's read side on both databases: listings, pagination, filters, job detail and events, redaction,
prefix resolution, dead letters and review, queues, overview and alerts, and 400s naming the parameter."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from starlette.testclient import TestClient

from reliable.control import Control
from reliable.operators import Operator
from reliable.redact import MASK
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.schema import alerts

from web_support import Tokens, bearer

READ_PATHS = ("/api/v1/jobs", "/api/v1/jobs/abcdef123", "/api/v1/jobs/abcdef123/events", "/api/v1/dlq",
              "/api/v1/review", "/api/v1/queues", "/api/v1/overview", "/api/v1/alerts", "/api/v1/openapi.json")


def make(store: StateStore, job_id: str, *, queue: str = "billing", actor: str = "charge",
         kwargs: dict[str, Any] | None = None, **extra: Any) -> None:
    """A PENDING job."""
    store.register(NewJob(job_id, queue, actor, {"args": [job_id], "kwargs": kwargs or {}, "options": {}}, **extra))


def ended(store: StateStore, job_id: str, event: Event, *, checkpoint: Any = None, **kw: Any) -> None:
    """A job that ran once and ended with `event` (DEAD_LETTER, NEED_REVIEW, FAIL...)."""
    make(store, job_id, **kw)
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    if checkpoint is not None:
        store.save_checkpoint(job_id, claim.lease_id, checkpoint, lease_ttl=60)
    store.finish(job_id, claim.lease_id, event, worker_id="w1",
                 error=ErrorInfo("permanent", "ValueError", "bad input"))


def get(client: TestClient, token: str, path: str, **params: Any) -> Any:
    response = client.get(path, params=params, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()


def ids(client: TestClient, token: str, path: str = "/api/v1/jobs", **params: Any) -> list[str]:
    """Every job id of a listing, following next_cursor to the end."""
    found: list[str] = []
    cursor = None
    while True:
        body = get(client, token, path, **params, **({"cursor": cursor} if cursor else {}))
        found += [job["job_id"] for job in body["jobs"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return found


def test_every_read_endpoint_needs_a_token(client: TestClient) -> None:
    for path in READ_PATHS:
        response = client.get(path)
        assert response.status_code == 401, path
        assert response.json()["error"] == {"status": 401, "message": response.json()["error"]["message"],
                                            "type": "Unauthorized"}


def test_pages_return_every_job_once_newest_change_first(client: TestClient, store: StateStore,
                                                          tokens: Tokens) -> None:
    for i in range(13):
        make(store, f"job-{i:02d}", queue="billing" if i % 2 else "exports")
    for i in range(4):
        ended(store, f"dead-{i}", Event.DEAD_LETTER)
    everything = ids(client, tokens.viewer, limit=4)
    assert sorted(everything) == sorted([f"job-{i:02d}" for i in range(13)] + [f"dead-{i}" for i in range(4)])
    assert len(everything) == len(set(everything))
    assert everything[:4] == [j["job_id"] for j in get(client, tokens.viewer, "/api/v1/jobs", limit=4)["jobs"]]
    two_states = ids(client, tokens.viewer, state=["pending", "DEAD"], limit=3)
    assert sorted(two_states) == sorted(everything)
    last = get(client, tokens.viewer, "/api/v1/jobs", limit=500)
    assert last["next_cursor"] is None and len(last["jobs"]) == 17
    times = [job["updated_at"] for job in last["jobs"]]
    assert times == sorted(times, reverse=True)


def test_filters(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    make(store, "b1", queue="billing", actor="charge", owner="team-pay", workflow_id="wf-1",
         kwargs={"invoice": "INV-42"})
    make(store, "e1", queue="exports", actor="export", owner="team-data")
    ended(store, "d1", Event.DEAD_LETTER, queue="exports", actor="export")
    viewer = tokens.viewer

    assert sorted(ids(client, viewer, queue="exports")) == ["d1", "e1"]
    assert ids(client, viewer, actor="charge") == ["b1"]
    assert ids(client, viewer, owner="team-data") == ["e1"]
    assert ids(client, viewer, workflow="wf-1") == ["b1"]
    assert ids(client, viewer, error_class="permanent") == ["d1"]
    # Text search over the arguments, any case: for those who see every job's arguments (an admin).
    assert ids(client, tokens.admin, q="inv-42") == ["b1"]
    assert ids(client, viewer, state="dead") == ["d1"]
    assert sorted(ids(client, viewer, state=["Pending"], queue="billing")) == ["b1"]
    newest = max(job["updated_at"] for job in get(client, viewer, "/api/v1/jobs")["jobs"])
    assert ids(client, viewer, changed_since=str(newest + 3600)) == []
    assert len(ids(client, viewer, changed_until=str(newest + 3600))) == 3
    assert ids(client, viewer, changed_until="2000-01-01T00:00:00Z") == []
    iso_later = datetime.fromtimestamp(newest + 3600, UTC).replace(tzinfo=None).isoformat()  # no zone: UTC
    assert len(ids(client, viewer, changed_since="2000-01-01T00:00:00+00:00", changed_until=iso_later)) == 3
    assert ids(client, viewer, changed_since=iso_later) == []


@pytest.mark.parametrize(("path", "params", "named"), [
    ("/api/v1/jobs", {"limit": "0"}, "'limit'"),
    ("/api/v1/jobs", {"limit": "501"}, "'limit'"),
    ("/api/v1/jobs", {"limit": "ten"}, "'limit'"),
    ("/api/v1/jobs", {"state": "sleeping"}, "'state'"),
    ("/api/v1/jobs", {"changed_since": "yesterday"}, "'changed_since'"),
    ("/api/v1/jobs", {"changed_until": "nan"}, "'changed_until'"),
    ("/api/v1/jobs", {"cursor": "not-a-cursor"}, "cursor"),
    ("/api/v1/jobs", {"status": "DEAD"}, "'status'"),
    ("/api/v1/jobs", {"q": ["a", "b"]}, "'q'"),
    ("/api/v1/dlq", {"include_discarded": "maybe"}, "'include_discarded'"),
    ("/api/v1/dlq", {"state": "PENDING"}, "'state'"),
    ("/api/v1/review", {"limit": "-1"}, "'limit'"),
    ("/api/v1/jobs/abcdef12", {"event_limit": "0"}, "'event_limit'"),
    ("/api/v1/jobs/abcdef12", {"since": "soon"}, "'since'"),
    ("/api/v1/jobs/abcdef12/events", {"limit": "1000"}, "'limit'"),
    ("/api/v1/alerts", {"state": "burning"}, "'state'"),
])
def test_bad_parameters_are_400_naming_the_parameter(client: TestClient, store: StateStore, tokens: Tokens,
                                                      path: str, params: dict[str, Any], named: str) -> None:
    make(store, "abcdef12")
    response = client.get(path, params=params, headers=bearer(tokens.viewer))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == 400 and named in error["message"] and error["type"], error


def test_read_only_callers_see_secrets_masked_operators_see_them(client: TestClient, store: StateStore,
                                                                  tokens: Tokens) -> None:
    ended(store, "secret-job", Event.DEAD_LETTER, kwargs={"password": "hunter2", "user": "bob"},
          checkpoint={"page": 3, "api_token": "tok-123"})
    for path in ("/api/v1/jobs", "/api/v1/dlq"):
        listed = get(client, tokens.viewer, path)["jobs"][0]
        assert "message" not in listed  # listings carry no message bodies (test_message_bounds.py)
        assert listed["checkpoint"] == {"page": 3, "api_token": MASK}
    detail = get(client, tokens.viewer, "/api/v1/jobs/secret-job")
    assert detail["job"]["message"]["kwargs"] == {"password": MASK, "user": "bob"}
    events = get(client, tokens.viewer, "/api/v1/jobs/secret-job/events", event="checkpoint")["events"]
    assert events and all(e["checkpoint"] == {"page": 3, "api_token": MASK} for e in events)
    assert "hunter2" not in json.dumps(detail) and "tok-123" not in json.dumps(detail)

    for token in (tokens.operator, tokens.admin):
        assert get(client, token, "/api/v1/jobs/secret-job")["job"]["message"]["kwargs"]["password"] == "hunter2"
        assert get(client, token, "/api/v1/jobs/secret-job")["job"]["checkpoint"]["api_token"] == "tok-123"
        events = get(client, token, "/api/v1/jobs/secret-job/events", event="checkpoint")["events"]
        assert events[0]["checkpoint"]["api_token"] == "tok-123"


def test_job_ids_in_paths_accept_a_unique_prefix(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    for job_id in ("abcdef-1", "abcdef-2", "zyxwvu-only", "short"):
        make(store, job_id)
    assert get(client, tokens.viewer, "/api/v1/jobs/zyxwvu")["job"]["job_id"] == "zyxwvu-only"
    assert get(client, tokens.viewer, "/api/v1/jobs/zyxwvu-o.../events")["job_id"] == "zyxwvu-only"
    assert get(client, tokens.viewer, "/api/v1/jobs/short")["job"]["job_id"] == "short"  # a whole id
    ambiguous = client.get("/api/v1/jobs/abcdef", headers=bearer(tokens.viewer))
    assert ambiguous.status_code == 409
    error = ambiguous.json()["error"]
    assert error["candidates"] == ["abcdef-1", "abcdef-2"] and error["type"] == "AmbiguousJobId"
    assert "abcdef-1, abcdef-2" in error["message"]
    for missing in ("abc", "nosuchjob", "zyxwvu-other"):
        response = client.get(f"/api/v1/jobs/{missing}", headers=bearer(tokens.viewer))
        assert response.status_code == 404, missing
        assert response.json()["error"]["type"] == "JobNotFound"
    response = client.post("/api/v1/jobs/abcdef/pause", json={"reason": "x"}, headers=bearer(tokens.admin))
    assert response.status_code == 409 and response.json()["error"]["candidates"] == ["abcdef-1", "abcdef-2"]
    assert all(e.event != "command_refused" for j in ("abcdef-1", "abcdef-2") for e in store.events(j))


def test_ambiguous_prefixes_list_at_most_ten_candidates(client: TestClient, store: StateStore,
                                                         tokens: Tokens) -> None:
    for i in range(12):
        make(store, f"batch-{i:02d}")
    error = client.get("/api/v1/jobs/batch-", headers=bearer(tokens.viewer)).json()["error"]
    assert error["candidates"] == [f"batch-{i:02d}" for i in range(10)] and error["message"].endswith(
        ", ...; give more characters")


def test_job_detail_and_event_history(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    ended(store, "d1", Event.DEAD_LETTER, checkpoint=1)
    detail = get(client, tokens.operator, "/api/v1/jobs/d1")
    assert detail["job"]["status"] == "DEAD" and detail["attempts"][0]["outcome"]
    assert detail["events"][0]["event"] == "enqueued"
    actions = {a["command"]: a for a in detail["actions"]}
    assert actions["requeue"]["allowed"] and actions["requeue"]["permitted"]
    assert not actions["pause"]["allowed"]
    assert not get(client, tokens.viewer, "/api/v1/jobs/d1")["actions"][0]["permitted"]

    events = get(client, tokens.viewer, "/api/v1/jobs/d1/events")["events"]
    names = [e["event"] for e in events]
    assert names[0] == "enqueued" and names[-1] == "dead_letter"
    assert [e["event"] for e in get(client, tokens.viewer, "/api/v1/jobs/d1/events", limit=1)["events"]] == [
        "dead_letter"]
    assert [e["event"] for e in get(client, tokens.viewer, "/api/v1/jobs/d1/events",
                                    event=["enqueued", "claim"])["events"]] == ["enqueued", "claim"]
    assert get(client, tokens.viewer, "/api/v1/jobs/d1/events", since=str(events[-1]["at"] + 3600))["events"] == []
    assert [e["event"] for e in get(client, tokens.viewer, "/api/v1/jobs/d1", event_limit=1)["events"]] == [
        "dead_letter"]


def test_dead_letters_exclude_discarded_jobs_and_review_lists_review(client: TestClient, store: StateStore,
                                                                     tokens: Tokens) -> None:
    ended(store, "dead-kept", Event.DEAD_LETTER)
    ended(store, "dead-gone", Event.DEAD_LETTER)
    ended(store, "review-1", Event.NEED_REVIEW, queue="exports")
    make(store, "pending-1")
    Control(store, identity=Operator("ada", "test", "test")).discard("dead-gone", reason="handled by hand")
    assert ids(client, tokens.viewer, "/api/v1/dlq") == ["dead-kept"]
    assert sorted(ids(client, tokens.viewer, "/api/v1/dlq", include_discarded="true")) == ["dead-gone", "dead-kept"]
    assert ids(client, tokens.viewer, "/api/v1/dlq", queue="exports") == []
    assert ids(client, tokens.viewer, "/api/v1/review") == ["review-1"]
    assert ids(client, tokens.viewer, "/api/v1/review", queue="billing") == []


def test_queues_and_overview(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    make(store, "p1")
    make(store, "p2")
    make(store, "x1", queue="exports")
    ended(store, "d1", Event.DEAD_LETTER, queue="exports")
    body = get(client, tokens.viewer, "/api/v1/queues")
    by_queue = {q["queue"]: q for q in body["queues"]}
    assert by_queue["billing"]["by_state"] == {"PENDING": 2}
    assert by_queue["exports"]["by_state"] == {"DEAD": 1, "PENDING": 1}
    oldest = by_queue["billing"]["oldest_pending_at"]
    assert oldest is not None and by_queue["billing"]["oldest_pending_age_seconds"] == pytest.approx(
        body["now"] - oldest)
    figures = get(client, tokens.viewer, "/api/v1/overview")
    assert figures["by_state"] == {"PENDING": 3, "DEAD": 1} and figures["dead_letters"] == 1
    assert len(figures["series"]["minutes"]) == 60


def test_alerts_are_listed_with_their_labels(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    now = store.now()
    with store.write() as conn:
        for name, state in (("JobStuck", "firing"), ("DeadLetters", "resolved"), ("QueueAge", "pending")):
            conn.execute(alerts.insert().values(
                fingerprint=f"fp-{name}", alertname=name, labels=json.dumps({"alertname": name, "queue": "billing"}),
                annotations=json.dumps({"summary": f"{name} summary"}), state=state, starts_at=now))
    listed = get(client, tokens.viewer, "/api/v1/alerts")["alerts"]
    assert [a["alertname"] for a in listed] == ["JobStuck", "QueueAge", "DeadLetters"]  # firing, pending, resolved
    assert listed[0]["labels"] == {"alertname": "JobStuck", "queue": "billing"}
    assert listed[0]["annotations"]["summary"] == "JobStuck summary" and listed[0]["starts_at"] == now
    firing = get(client, tokens.viewer, "/api/v1/alerts", state="FIRING")["alerts"]
    assert [a["alertname"] for a in firing] == ["JobStuck"]
