"""Issue 42 item 6 in the API (SQLite and PostgreSQL): a preview's counted_digest, changes_nothing
and expired; the confirmation by its creator (nobody else) naming the counted set instead of the
token, its rights read again; the console's listing and page of a preview that expired."""

from __future__ import annotations

from typing import Any

from starlette.testclient import TestClient
from test_operations import URL, body, failed

from reliable.access import ApiTokens
from reliable.operations import counted_digest
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.schema import operations

from support import wait_for
from web_support import Tokens, bearer, session


def expire(store: StateStore, operation_id: str) -> None:
    with store.write() as conn:
        conn.execute(operations.update().where(operations.c.operation_id == operation_id)
                     .values(expires_at=store.now() - 1))


def test_a_preview_says_its_digest_whether_it_changes_anything_and_when_it_expired(
        client: TestClient, tokens: Tokens, store: StateStore) -> None:
    failed(store, "b1", "b2")
    failed(store, "n1", idempotent=False)
    created = client.post(URL, headers=bearer(tokens.admin), json=body("requeue", ids=["b1", "b2"])).json()
    assert created["counted_digest"] == counted_digest(["b1", "b2"]) or created["counted_digest"] == counted_digest(
        ["b2", "b1"])
    assert (created["changes_nothing"], created["expired"]) == (False, False)
    nothing = client.post(URL, headers=bearer(tokens.admin), json=body("requeue", ids=["n1"])).json()
    assert nothing["would_refuse"] == 1 and nothing["changes_nothing"] is True
    expire(store, nothing["operation_id"])
    seen = client.get(f"{URL}/{nothing['operation_id']}", headers=bearer(tokens.admin)).json()
    assert (seen["status"], seen["expired"]) == ("expired", True)
    listed = {op["operation_id"]: op for op in client.get(URL, headers=bearer(tokens.admin)).json()["operations"]}
    assert listed[nothing["operation_id"]]["expired"] and not listed[created["operation_id"]]["expired"]
    console, _ = session(store, tokens.admin)
    listing = console.get("/operations").text
    assert "1 counted, not confirmed" in listing and "2 counted · expires" in listing and "0 / 2" not in listing
    page = console.get(f"/operations/{nothing['operation_id']}").text
    assert 'id="op-expiry">Expired at' in page and "Confirm:" not in page
    waiting = console.get(f"/operations/{created['operation_id']}").text
    assert 'id="op-expiry" class="meta">This count expires at' in waiting and "waits 5m 00s" in waiting


def test_its_creator_confirms_by_the_counted_set_and_nobody_else(client: TestClient, tokens: Tokens,
                                                                 store: StateStore) -> None:
    failed(store, "b1", "b2")
    created = client.post(URL, headers=bearer(tokens.operator), json=body("requeue", ids=["b1", "b2"])).json()
    confirm = f"{URL}/{created['operation_id']}/confirm"

    def post(token: str, payload: dict[str, Any]) -> Any:
        return client.post(confirm, headers=bearer(token), json=payload)

    both = post(tokens.operator, {"confirm_token": created["confirm_token"], "counted_digest": "x"})
    assert both.status_code == 400 and "give one of them" in both.json()["error"]["message"]
    unknown = post(tokens.operator, {"counted_digest": created["counted_digest"], "extra": 1})
    assert unknown.status_code == 400 and "unknown field 'extra'" in unknown.json()["error"]["message"]
    other_set = post(tokens.operator, {"counted_digest": counted_digest(["b1"])})
    assert other_set.status_code == 409 and "counted other jobs" in other_set.json()["error"]["message"]
    _, olga = ApiTokens(store).create("olga", "operator", queues=["billing"])
    assert post(olga, {"counted_digest": created["counted_digest"]}).status_code == 403  # not hers
    # Nor an admin's: counted with the creator's rights, it would run with other ones.
    admin = post(tokens.admin, {"counted_digest": created["counted_digest"]})
    assert admin.status_code == 403 and "only they may confirm it" in admin.json()["error"]["message"]
    viewer = post(tokens.viewer, {"counted_digest": created["counted_digest"]})
    assert viewer.status_code == 403
    assert {store.get(job_id).status for job_id in ("b1", "b2")} == {JobStatus.FAILED}
    started = post(tokens.operator, {"counted_digest": created["counted_digest"]})
    assert started.status_code == 202 and started.json()["status"] == "running"
    wait_for(lambda: client.get(f"{URL}/{created['operation_id']}", headers=bearer(tokens.operator)).json()[
        "status"] == "finished", "the operation to finish", timeout=30)
    assert {store.get(job_id).status for job_id in ("b1", "b2")} == {JobStatus.PENDING}
    again = post(tokens.operator, {"counted_digest": created["counted_digest"]})
    assert again.status_code == 409 and "confirmed already" in again.json()["error"]["message"]


def test_rights_are_read_again_at_the_confirmation(client: TestClient, tokens: Tokens, store: StateStore) -> None:
    failed(store, "b1")
    keys = ApiTokens(store)
    _, token = keys.create("omar", "operator", queues=["billing"])
    created = client.post(URL, headers=bearer(token), json=body("requeue", ids=["b1"])).json()
    omar = next(t for t in keys.list() if t.name == "omar")
    keys.revoke(omar.token_id, reason="left the team")
    refused = client.post(f"{URL}/{created['operation_id']}/confirm", headers=bearer(token),
                          json={"counted_digest": created["counted_digest"]})
    assert refused.status_code == 401
    assert store.get("b1").status is JobStatus.FAILED
