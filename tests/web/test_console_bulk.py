"""The console's bulk actions: count first (nothing changes), confirm (its creator, from any
browser, naming the counted set), follow the run, cancel; every rule is the engine's and Control's
(scoped operators are refused per job)."""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from reliable.access import ApiTokens
from reliable.operations import counted_digest
from reliable.options import STORED_CONTRACT
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore

from support import wait_for
from web_support import Tokens, csrf_of, session


def failed_job(store: StateStore, job_id: str, queue: str) -> None:
    """A FAILED job of an idempotent actor on `queue`."""
    store.register(NewJob(job_id, queue, "invoice", {"args": [job_id], "kwargs": {}, "options": {}}))
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    store.finish(job_id, claim.lease_id, Event.FAIL, worker_id="w1", error=ErrorInfo("permanent", "ValueError", "x"))


def operation_id_of(response_url: str) -> str:
    found = re.search(r"/operations/([0-9a-f]+)$", response_url)
    assert found is not None, response_url
    return found.group(1)


def confirm(client: TestClient, csrf: str, op: str, digest: str | None = None) -> str:
    """Submit the operation page's Confirm form (the counted set's digest it carries, unless `digest`)."""
    found = re.search(r'name="counted_digest" value="([0-9a-f]+)"', client.get(f"/operations/{op}").text)
    assert found is not None or digest is not None
    response = client.post(f"/operations/{op}/confirm", data={"csrf_token": csrf,
                                                               "counted_digest": digest or found.group(1)})
    assert response.status_code == 200, response.text
    return response.text


def count(client: TestClient, csrf: str, **fields: str | list[str]) -> str:
    """Submit a list page's bulk form; the operation it counted."""
    response = client.post("/bulk", data={"csrf_token": csrf, **fields})
    assert response.status_code == 200, response.text
    return operation_id_of(str(response.url))


def test_a_bulk_retry_counts_first_then_runs_after_the_confirmation(store: StateStore, tokens: Tokens) -> None:
    for n in range(3):
        failed_job(store, f"billing-{n}", "billing")
    failed_job(store, "exports-0", "exports")
    client, csrf = session(store, tokens.operator)  # otto: an operator of queue billing
    listing = client.get("/jobs?state=FAILED").text
    assert 'aria-label="Bulk action"' in listing and 'form="selection"' in listing
    op = count(client, csrf, view="jobs", state="FAILED", command="requeue", scope="filter", reason="fixed upstream")
    page = client.get(f"/operations/{op}").text
    # otto may not act on queue exports: its job is neither counted nor shown (issue 38)
    assert "requeue · 3 jobs" in page and "Confirm: requeue 3 jobs" in page and "awaiting_confirmation" in page
    assert "exports-0" not in page
    assert {store.get(f"billing-{n}").status for n in range(3)} == {JobStatus.FAILED}  # nothing changed yet
    assert "confirmed: the operation runs now" in confirm(client, csrf, op)
    wait_for(lambda: "finished" in client.get(f"/operations/{op}").text, "the operation to finish", timeout=30)
    done = client.get(f"/operations/{op}").text
    assert "requeue · 3 jobs" in done and done.count('<td class="id">') == 3
    assert {store.get(f"billing-{n}").status for n in range(3)} == {JobStatus.PENDING}
    assert store.get("exports-0").status is JobStatus.FAILED and not store.events("exports-0",
                                                                                 events=["command_refused"])
    requeue = store.events("billing-0", events=["requeue"])[-1]
    assert requeue.operator == "otto" and requeue.reason == "fixed upstream"
    assert op in client.get("/operations").text


def test_ticked_jobs_only_and_a_confirmation_must_name_the_counted_set(store: StateStore, tokens: Tokens) -> None:
    for n in range(3):
        failed_job(store, f"billing-{n}", "billing")
    client, csrf = session(store, tokens.admin)
    nothing = client.post("/bulk", data={"csrf_token": csrf, "view": "jobs", "command": "requeue",
                                         "scope": "selected", "reason": "r"})
    assert "no job is selected" in nothing.text
    op = count(client, csrf, view="jobs", command="requeue", scope="selected", reason="two of them",
               job_id=["billing-0", "billing-2"])
    assert "requeue · 2 jobs" in client.get(f"/operations/{op}").text
    other, other_csrf = session(store, tokens.admin)  # the same person, another browser: it may confirm...
    assert "Confirm: requeue 2 jobs" in other.get(f"/operations/{op}").text
    # ... but only the set it was shown: a confirmation naming another set (a forged or stale form) is refused
    refused = confirm(other, other_csrf, op, digest=counted_digest(["billing-0", "billing-1"]))
    assert "not confirmed: operation" in refused and "counted other jobs than the confirmation names" in refused
    assert client.post(f"/operations/{op}/cancel", data={"csrf_token": csrf}).status_code == 200
    assert "cancelled" in client.get(f"/operations/{op}").text
    assert {store.get(f"billing-{n}").status for n in range(3)} == {JobStatus.FAILED}


def test_the_same_person_confirms_from_another_browser_and_others_may_not(store: StateStore, tokens: Tokens) -> None:
    for n in range(2):
        failed_job(store, f"billing-{n}", "billing")
    client, csrf = session(store, tokens.operator)  # otto counts in one browser...
    op = count(client, csrf, view="jobs", state="FAILED", command="requeue", scope="filter", reason="fixed")
    _, token = ApiTokens(store).create("olga", "operator", queues=["billing"])
    stranger, stranger_csrf = session(store, token)  # another operator of the queue: not theirs to confirm
    page = stranger.get(f"/operations/{op}").text
    assert "Confirm:" not in page and "Only otto (who counted these jobs, with their rights) may confirm them" in page
    forged = stranger.post(f"/operations/{op}/confirm", data={"csrf_token": stranger_csrf,
                                                              "counted_digest": counted_digest(["billing-0",
                                                                                                "billing-1"])})
    assert forged.status_code == 403  # NotAuthorized: only its creator or an admin
    again, again_csrf = session(store, tokens.operator)  # ... and confirms in another: no cookie carries it
    assert "confirmed: the operation runs now" in confirm(again, again_csrf, op)
    wait_for(lambda: "finished" in again.get(f"/operations/{op}").text, "the operation to finish", timeout=30)
    assert {store.get(f"billing-{n}").status for n in range(2)} == {JobStatus.PENDING}


def test_read_only_users_get_no_bulk_form_and_cannot_post_one(store: StateStore, tokens: Tokens) -> None:
    failed_job(store, "billing-0", "billing")
    client, csrf = session(store, tokens.viewer)
    assert 'aria-label="Bulk action"' not in client.get("/jobs?state=FAILED").text
    refused = client.post("/bulk", data={"csrf_token": csrf, "view": "jobs", "state": "FAILED",
                                         "command": "requeue", "scope": "filter", "reason": "r"})
    assert refused.status_code == 403
    admin, _ = session(store, tokens.admin)
    no_csrf = admin.post("/bulk", data={"view": "jobs", "state": "FAILED", "command": "requeue", "scope": "filter",
                                        "reason": "r"})
    assert no_csrf.status_code == 403
    assert store.get("billing-0").status is JobStatus.FAILED


def test_an_unnarrowed_filter_or_a_missing_reason_is_refused_with_the_reason(store: StateStore) -> None:
    failed_job(store, "billing-0", "billing")
    _, token = ApiTokens(store).create("ada", "admin")
    client, csrf = session(store, token)
    wide = client.post("/bulk", data={"csrf_token": csrf, "view": "jobs", "command": "pause", "scope": "filter",
                                      "reason": "r"})
    assert wide.status_code == 200 and "bulk pause refused" in wide.text
    unreasoned = client.post("/bulk", data={"csrf_token": csrf, "view": "jobs", "state": "FAILED",
                                            "command": "requeue", "scope": "filter", "reason": ""})
    assert "bulk requeue refused" in unreasoned.text and "reason" in unreasoned.text
    assert csrf_of(client.get("/operations").text) and "No bulk operation yet" in client.get("/operations").text


def test_the_count_page_says_what_would_be_refused_and_the_list_says_all_were(store: StateStore,
                                                                              tokens: Tokens) -> None:
    for n in range(3):
        store.register(NewJob(f"charge-{n}", "billing", "charge",
                              {"args": [n], "kwargs": {}, "options": {STORED_CONTRACT: {"idempotent": False}}}))
        claim = store.claim(f"charge-{n}", worker_id="w1", lease_ttl=60)
        store.finish(f"charge-{n}", claim.lease_id, Event.FAIL, worker_id="w1",
                     error=ErrorInfo("permanent", "ValueError", "x"))
    client, csrf = session(store, tokens.admin)
    op = count(client, csrf, view="jobs", state="FAILED", command="requeue", scope="filter", reason="card fixed")
    page = client.get(f"/operations/{op}").text
    assert "3 match; 3 would be refused (all of them: confirming changes nothing)" in page
    assert "3: actor &#39;charge&#39; is not idempotent" in page and "Requeue/restart non-idempotent jobs too" in page
    assert page.count("--allow-duplicate-side-effects") == 1
    # Confirming would change nothing: the button is disabled and says why
    button = ('<button type="submit" id="confirm" disabled aria-describedby="confirm-why">'
              'Confirm: requeue 3 jobs</button>')
    assert button in page and "every one of the 3 jobs would be refused, so confirming would change nothing" in page
    confirm(client, csrf, op)  # a job may have moved since the count: the engine still takes it
    wait_for(lambda: "finished" in client.get(f"/operations/{op}").text, "the operation to finish", timeout=30)
    done = client.get(f"/operations/{op}").text
    assert done.count("is not idempotent") == 3 and done.count("--allow-duplicate-side-effects") == 1
    assert "finished: <strong class=\"refused\">all 3 refused</strong>" in client.get("/operations").text
    assert {store.get(f"charge-{n}").status for n in range(3)} == {JobStatus.FAILED}
