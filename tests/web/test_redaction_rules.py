"""What a caller who may not act on a job sees: secrets masked in its arguments, checkpoint, errors and
tracebacks; no search over arguments (a match would tell the masked value) unless it sees every job."""

from __future__ import annotations

from starlette.testclient import TestClient

from reliable.redact import MASK
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.web import WebConfig, create_app

from web_support import Tokens, bearer, csrf_of, session

SECRET = "hunter2"
CARD = "4111111111111111"


def secret_job(store: StateStore, job_id: str, queue: str) -> None:
    """A FAILED job of `queue` whose arguments, error and traceback quote secrets."""
    store.register(NewJob(job_id, queue, "charge", {"args": [], "kwargs": {"password": SECRET, "card_number": CARD,
                                                                            "amount": 12}, "options": {}}))
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    store.finish(job_id, claim.lease_id, Event.FAIL, worker_id="w1",
                 error=ErrorInfo("permanent", "ValueError", f"declined: card_number={CARD}",
                                 traceback=f"Traceback ...\nValueError: declined: card_number={CARD}\n"))


def seen(client: TestClient, token: str, job_id: str) -> str:
    return client.get(f"/api/v1/jobs/{job_id}", headers=bearer(token)).text


def test_only_callers_who_may_act_on_a_job_see_its_secrets(client: TestClient, store: StateStore,
                                                            tokens: Tokens) -> None:
    secret_job(store, "billing-1", "billing")
    secret_job(store, "payments-1", "payments")
    for token in (tokens.viewer, tokens.operator):  # otto acts on queue billing only
        shown = seen(client, token, "payments-1")
        assert SECRET not in shown and CARD not in shown and MASK in shown, shown
    for job_id in ("billing-1", "payments-1"):
        assert SECRET in seen(client, tokens.admin, job_id) and CARD in seen(client, tokens.admin, job_id)
    assert SECRET in seen(client, tokens.operator, "billing-1")
    listing = client.get("/api/v1/jobs", headers=bearer(tokens.viewer)).text
    assert SECRET not in listing and CARD not in listing
    events = client.get("/api/v1/jobs/payments-1/events", headers=bearer(tokens.viewer)).text
    assert CARD not in events


def test_searching_arguments_needs_access_to_every_jobs_arguments(client: TestClient, store: StateStore,
                                                                  tokens: Tokens) -> None:
    secret_job(store, "billing-1", "billing")
    for token in (tokens.viewer, tokens.operator):
        refused = client.get("/api/v1/jobs", params={"q": f'"password": "{SECRET[:3]}'}, headers=bearer(token))
        assert refused.status_code == 403 and "may not search arguments" in refused.text
    found = client.get("/api/v1/jobs", params={"q": SECRET}, headers=bearer(tokens.admin)).json()["jobs"]
    assert [job["job_id"] for job in found] == ["billing-1"]


def test_the_console_masks_and_refuses_the_same(store: StateStore, tokens: Tokens) -> None:
    secret_job(store, "payments-1", "payments")
    viewer, _ = session(store, tokens.viewer)
    page = viewer.get("/jobs/payments-1").text
    assert SECRET not in page and CARD not in page and "masked for your role" in page
    listing = viewer.get("/jobs").text
    assert CARD not in listing and "Arguments contain" not in listing  # no search field for a viewer
    assert viewer.get("/jobs", params={"search": SECRET}).status_code == 403
    admin, _ = session(store, tokens.admin)
    assert CARD in admin.get("/jobs/payments-1").text and "Arguments contain" in admin.get("/jobs").text


def test_an_operations_text_search_is_masked_for_those_who_may_not_search(store: StateStore,
                                                                         tokens: Tokens) -> None:
    secret_job(store, "billing-1", "billing")
    admin = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    created = admin.post("/api/v1/operations", headers=bearer(tokens.admin),
                         json={"command": "requeue", "filter": {"q": SECRET}, "reason": "r"})
    assert created.status_code == 201, created.text
    for token in (tokens.viewer, tokens.operator):
        listed = admin.get("/api/v1/operations", headers=bearer(token)).text
        assert SECRET not in listed and MASK in listed
    assert SECRET in admin.get("/api/v1/operations", headers=bearer(tokens.admin)).text


def test_the_console_keeps_few_confirmation_tokens_in_its_cookie(store: StateStore, tokens: Tokens) -> None:
    secret_job(store, "billing-1", "billing")
    client, csrf = session(store, tokens.admin)
    for _ in range(30):
        response = client.post("/bulk", data={"csrf_token": csrf, "view": "jobs", "state": "FAILED",
                                              "command": "requeue", "scope": "filter", "reason": "r"})
        assert response.status_code == 200
    assert len(client.cookies["reliable_session"]) < 2048
    assert csrf_of(client.get("/").text) == csrf
