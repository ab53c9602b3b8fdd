"""Bulk operations through the API (/api/v1/operations), each route and role, on both databases."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from reliable.options import STORED_CONTRACT
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.web import WebConfig, create_app

from support import wait_for
from web_support import Tokens, bearer

URL = "/api/v1/operations"


def make(store: StateStore, job_id: str, *, queue: str = "billing", idempotent: bool = True) -> None:
    options = {} if idempotent else {STORED_CONTRACT: {"idempotent": False}}
    store.register(NewJob(job_id, queue, "charge", {"args": [job_id], "kwargs": {}, "options": options}))


def failed(store: StateStore, *ids: str, queue: str = "billing", idempotent: bool = True) -> None:
    for job_id in ids:
        make(store, job_id, queue=queue, idempotent=idempotent)
        claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
        store.finish(job_id, claim.lease_id, Event.FAIL, worker_id="w1",
                     error=ErrorInfo("permanent", "ValueError", "bad card"))


def body(command: str = "restart", reason: str | None = "card processor is back", **flt: Any) -> dict[str, Any]:
    return {"command": command, "filter": flt or {"state": ["failed"]}, "reason": reason}


def run_to_end(client: TestClient, token: str, created: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"{URL}/{created['operation_id']}/confirm", headers=bearer(token),
                           json={"confirm_token": created["confirm_token"]})
    assert response.status_code == 202, response.text
    assert response.json()["status"] == "running"

    def ended_op() -> dict[str, Any] | None:
        op: dict[str, Any] = client.get(f"{URL}/{created['operation_id']}", headers=bearer(token)).json()
        return op if op["status"] not in ("running", "awaiting_confirmation") else None

    return wait_for(ended_op, "the operation to end", timeout=60)


def test_preview_confirm_and_progress(client: TestClient, tokens: Tokens, store: StateStore) -> None:
    failed(store, "f1", "f2")
    make(store, "p1", queue="billing")
    response = client.post(URL, headers=bearer(tokens.admin), json=body())
    assert response.status_code == 201, response.text
    created = response.json()
    assert (created["command"], created["status"], created["total"]) == ("restart", "awaiting_confirmation", 2)
    assert sorted(created["sample"]) == ["f1", "f2"] and created["counts_by_state"] == {"FAILED": 2}
    assert created["confirm_token"] and created["expires_at"] > created["created_at"]
    assert "job_ids" not in created and created["operator"] == "ada" and created["filter"] == {"statuses": ["FAILED"]}
    op = run_to_end(client, tokens.admin, created)
    assert (op["status"], op["done"], op["counts"]) == ("finished", 2, {"done": 2})
    assert sorted(op["job_ids"]) == ["f1", "f2"] and [r["outcome"] for r in op["results"]] == ["done", "done"]
    assert "confirm_token" not in op
    event = store.events("f1")[-1]
    assert (event.event, event.operator, event.reason) == ("restart", "ada", "card processor is back")
    assert event.detail["operation_id"] == created["operation_id"] and event.detail["source"] == "api:token"
    assert store.get("p1").status is JobStatus.PENDING


def test_the_filter_takes_the_jobs_lists_parameters(client: TestClient, tokens: Tokens, store: StateStore) -> None:
    failed(store, "f1", "f2")
    failed(store, "e1", queue="exports")
    response = client.post(URL, headers=bearer(tokens.admin),
                           json=body(state="FAILED,DEAD", queue="billing", changed_since="2000-01-01T00:00:00Z",
                                     q="f1"))
    assert response.status_code == 201, response.text
    assert response.json()["sample"] == ["f1"]
    response = client.post(URL, headers=bearer(tokens.admin), json=body(ids=["e1", "f2", "missing"]))
    assert sorted(response.json()["sample"]) == ["e1", "f2"] and response.json()["total"] == 2


@pytest.mark.parametrize(("payload", "message"), [
    ({"command": "restart", "filter": {}, "reason": "r"}, "needs a filter that narrows"),
    ({"command": "restart", "filter": {"queues": "billing"}, "reason": "r"}, "unknown filter parameter 'queues'"),
    ({"command": "restart", "filter": {"state": "sleepy"}, "reason": "r"}, "unknown status"),
    ({"command": "restart", "filter": {"state": "failed"}}, "restart needs a reason"),
    ({"command": "restart", "filter": {"state": "failed"}, "reason": "r", "dry": 1}, "unknown field 'dry'"),
    ({"command": "launch", "filter": {"state": "failed"}, "reason": "r"}, "unknown command 'launch'"),
    ({"filter": {"state": "failed"}, "reason": "r"}, "command is required"),
    ({"command": "reconcile", "filter": {"state": "review"}, "reason": "r", "options": {"resolution": "maybe"}},
     "resolution"),
    ({"command": "restart", "filter": {"state": "failed"}, "reason": "r", "rate": 1000}, "at most 20"),
    ({"command": "discard", "filter": {"state": "dead", "exclude_discarded": "yes"}, "reason": "r"},
     "filter.exclude_discarded must be true or false"),
])
def test_bad_requests_are_400_with_a_clear_error(client: TestClient, tokens: Tokens, payload: dict[str, Any],
                                                 message: str) -> None:
    response = client.post(URL, headers=bearer(tokens.admin), json=payload)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["status"] == 400 and message in error["message"] and error["type"]


def test_a_body_that_is_not_a_json_object_is_400(client: TestClient, tokens: Tokens) -> None:
    for content in (b"not json", b"[1, 2]"):
        response = client.post(URL, headers={**bearer(tokens.admin), "content-type": "application/json"},
                               content=content)
        assert response.status_code == 400 and "JSON object" in response.json()["error"]["message"]


def test_a_viewer_is_refused_and_the_refusal_is_listed(client: TestClient, tokens: Tokens, store: StateStore) -> None:
    failed(store, "f1")
    response = client.post(URL, headers=bearer(tokens.viewer), json=body())
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "NotAuthorized"
    listed = client.get(URL, headers=bearer(tokens.viewer)).json()["operations"]
    assert [(op["status"], op["operator"]) for op in listed] == [("refused", "vera")]
    assert client.post(f"{URL}/{listed[0]['operation_id']}/cancel", headers=bearer(tokens.viewer)).status_code == 403
    assert store.get("f1").status is JobStatus.FAILED


def test_a_scoped_operator_counts_and_acts_on_its_jobs_only(client: TestClient, tokens: Tokens,
                                                            store: StateStore) -> None:
    failed(store, "b1")
    failed(store, "e1", queue="exports")
    created = client.post(URL, headers=bearer(tokens.operator), json=body()).json()
    assert (created["total"], created["not_permitted"], created["sample"]) == (1, 0, ["b1"])
    op = run_to_end(client, tokens.operator, created)
    assert op["counts"] == {"done": 1} and op["job_ids"] == ["b1"]
    assert store.get("e1").status is JobStatus.FAILED and not store.events("e1", events=["command_refused"])


def test_confirmation_is_refused_when_wrong_repeated_or_not_yours(client: TestClient, tokens: Tokens,
                                                                  store: StateStore) -> None:
    failed(store, "b1")
    created = client.post(URL, headers=bearer(tokens.operator), json=body()).json()
    confirm = f"{URL}/{created['operation_id']}/confirm"
    wrong = client.post(confirm, headers=bearer(tokens.operator), json={"confirm_token": "guess"})
    assert wrong.status_code == 409 and "wrong confirmation token" in wrong.json()["error"]["message"]
    missing = client.post(confirm, headers=bearer(tokens.operator), json={})
    assert missing.status_code == 400 and "confirm_token is required" in missing.json()["error"]["message"]
    viewer = client.post(confirm, headers=bearer(tokens.viewer), json={"confirm_token": created["confirm_token"]})
    assert viewer.status_code == 403
    run_to_end(client, tokens.operator, created)
    again = client.post(confirm, headers=bearer(tokens.admin), json={"confirm_token": created["confirm_token"]})
    assert again.status_code == 409 and "confirmed already" in again.json()["error"]["message"]
    unknown = client.post(f"{URL}/nope/confirm", headers=bearer(tokens.admin), json={"confirm_token": "x"})
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "OperationNotFound"


def test_an_admin_may_confirm_an_operators_preview(client: TestClient, tokens: Tokens, store: StateStore) -> None:
    failed(store, "b1")
    created = client.post(URL, headers=bearer(tokens.operator), json=body()).json()
    op = run_to_end(client, tokens.admin, created)
    assert (op["operator"], op["confirmed_by"], op["status"]) == ("otto", "ada", "finished")


def test_get_list_and_cancel_a_preview(client: TestClient, tokens: Tokens, store: StateStore) -> None:
    failed(store, "b1")
    created = client.post(URL, headers=bearer(tokens.admin), json=body()).json()
    one = client.get(f"{URL}/{created['operation_id']}", headers=bearer(tokens.viewer))
    assert one.status_code == 200 and one.json()["job_ids"] == ["b1"] and one.json()["results"] == []
    assert client.get(f"{URL}/nope", headers=bearer(tokens.viewer)).status_code == 404
    assert client.get(URL).status_code == 401
    assert client.get(f"{URL}?limit=0", headers=bearer(tokens.viewer)).status_code == 400
    assert client.post(f"{URL}/{created['operation_id']}/cancel", headers=bearer(tokens.operator)).status_code == 403
    cancelled = client.post(f"{URL}/{created['operation_id']}/cancel", headers=bearer(tokens.admin))
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["cancelled_by"] == "ada"
    again = client.post(f"{URL}/{created['operation_id']}/cancel", headers=bearer(tokens.admin))
    assert again.status_code == 409
    listed = client.get(URL, headers=bearer(tokens.viewer)).json()["operations"]
    assert [op["status"] for op in listed] == ["cancelled"] and "results" not in listed[0]


@pytest.fixture
def slow_client(store: StateStore) -> Iterator[TestClient]:
    """An app whose bulk runs act on one job every 20 seconds (a cancel wakes the wait at once)."""
    config = WebConfig(secret_key="test-secret", bulk_rate=0.05)
    with TestClient(create_app(store, config=config)) as test_client:
        yield test_client


def test_cancelling_a_run_stops_it_before_its_next_job(slow_client: TestClient, tokens: Tokens,
                                                       store: StateStore) -> None:
    failed(store, "b1", "b2", "b3", "b4")
    created = slow_client.post(URL, headers=bearer(tokens.operator), json=body()).json()
    op_url = f"{URL}/{created['operation_id']}"
    response = slow_client.post(f"{op_url}/confirm", headers=bearer(tokens.operator),
                                json={"confirm_token": created["confirm_token"]})
    assert response.status_code == 202
    # the first job goes at once, the next waits for the rate limit: cancel while it waits
    wait_for(lambda: sum(store.get(j).status is JobStatus.PENDING for j in ("b1", "b2", "b3", "b4")) == 1,
             "the first job to be restarted")
    response = slow_client.post(f"{op_url}/cancel", headers=bearer(tokens.operator))
    assert response.status_code == 200 and response.json()["cancel_requested"] is True
    op = wait_for(lambda: (o := slow_client.get(op_url, headers=bearer(tokens.operator)).json())["status"]
                  == "cancelled" and o, "the run to stop", timeout=30)
    assert op["done"] == 1 and op["cancelled_by"] == "otto" and len(op["results"]) == 1
    assert sum(store.get(j).status is JobStatus.FAILED for j in ("b1", "b2", "b3", "b4")) == 3


def test_the_count_says_how_many_would_be_refused_and_why(client: TestClient, tokens: Tokens,
                                                          store: StateStore) -> None:
    failed(store, "n1", "n2", "n3", idempotent=False)
    failed(store, "i1")
    failed(store, "e1", queue="exports")
    created = client.post(URL, headers=bearer(tokens.operator), json=body("requeue")).json()
    assert (created["total"], created["would_refuse"], created["not_permitted"]) == (4, 3, 0)
    groups = {group["why"]: group for group in created["refusals"]}
    idempotency = next(group for why, group in groups.items() if "not idempotent" in why)
    assert idempotency["count"] == 3 and "--allow-duplicate-side-effects" in idempotency["hint"]
    assert not any("exports" in why for why in groups)  # not counted: outside otto's queues
    assert not store.events("n1", events=["command_refused"])  # counting writes nothing
    op = run_to_end(client, tokens.operator, created)
    assert op["counts"] == {"done": 1, "refused": 3} and op["would_refuse"] == 3 and not op["all_refused"]
    refused = next(r for r in op["results"] if r["job_id"] == "n1")
    assert "not idempotent" in refused["message"] and "--allow" not in refused["message"]
    assert "--allow-duplicate-side-effects" in refused["hint"]
    allowed = client.post(URL, headers=bearer(tokens.admin), json={
        **body("requeue", state=["failed"], queue=["billing"]), "options": {"allow_duplicate_side_effects": True}})
    assert allowed.json()["would_refuse"] == 0 and allowed.json()["refusals"] == []


def test_an_operation_whose_jobs_were_all_refused_says_so(client: TestClient, tokens: Tokens,
                                                          store: StateStore) -> None:
    failed(store, "n1", "n2", idempotent=False)
    created = client.post(URL, headers=bearer(tokens.admin), json=body("requeue")).json()
    assert created["would_refuse"] == 2 == created["total"]
    op = run_to_end(client, tokens.admin, created)
    assert (op["status"], op["counts"], op["all_refused"]) == ("finished", {"refused": 2}, True)
    listed = client.get(URL, headers=bearer(tokens.viewer)).json()["operations"]
    assert [(o["operation_id"], o["all_refused"]) for o in listed] == [(created["operation_id"], True)]


def test_an_admins_search_shows_others_only_the_ids_in_their_scope(client: TestClient, tokens: Tokens,
                                                                  store: StateStore) -> None:
    """Which jobs a search matched tells what their arguments hold: one who may not search sees the
    text masked and, of the ids and results, only those of jobs it may act on (the API and the console)."""
    from web_support import session

    failed(store, "x-b1")
    failed(store, "x-o1", queue="other")
    failed(store, "y-b2")
    response = client.post(URL, headers=bearer(tokens.admin), json=body(state=["failed"], q="X-"))
    assert response.status_code == 201, response.text
    created = response.json()
    ended = run_to_end(client, tokens.admin, created)
    assert sorted(ended["job_ids"]) == ["x-b1", "x-o1"] and ended["filter"]["search"] == "X-"
    assert sorted(r["job_id"] for r in ended["results"]) == ["x-b1", "x-o1"]
    detail = f"{URL}/{created['operation_id']}"

    as_viewer = client.get(detail, headers=bearer(tokens.viewer)).json()
    assert as_viewer["filter"]["search"] == "***"
    assert (as_viewer["job_ids"], as_viewer["sample"], as_viewer["results"]) == ([], [], [])
    as_operator = client.get(detail, headers=bearer(tokens.operator)).json()  # scoped to billing
    assert as_operator["job_ids"] == as_operator["sample"] == ["x-b1"]
    assert [r["job_id"] for r in as_operator["results"]] == ["x-b1"] and as_operator["total"] == 2
    listed = client.get(URL, headers=bearer(tokens.viewer)).json()["operations"]
    assert [(op["filter"]["search"], op["sample"]) for op in listed] == [("***", [])]
    assert "x-o1" not in client.get(URL, headers=bearer(tokens.operator)).text

    viewer_page = session(store, tokens.viewer)[0].get(f"/operations/{created['operation_id']}")
    operator_page = session(store, tokens.operator)[0].get(f"/operations/{created['operation_id']}")
    assert viewer_page.status_code == operator_page.status_code == 200
    assert "x-b1" not in viewer_page.text and "x-o1" not in viewer_page.text
    assert "x-b1" in operator_page.text and "x-o1" not in operator_page.text
    admin_page = session(store, tokens.admin)[0].get(f"/operations/{created['operation_id']}")
    assert "x-b1" in admin_page.text and "x-o1" in admin_page.text
