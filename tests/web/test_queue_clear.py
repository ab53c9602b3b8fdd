"""Issue 42, item 3, without a browser, on SQLite and PostgreSQL: the queues page states its rate's
window; its Clear pending form is offered only where the operators policy allows `cancel` on the
queue and it has PENDING jobs, and it posts the bulk flow's preview (counted first, nothing changed)
of exactly the queue's PENDING jobs."""

from __future__ import annotations

from reliable.states import JobStatus
from reliable.store import NewJob, StateStore

from web_support import Tokens, session


def _jobs(store: StateStore) -> None:
    for queue in ("billing", "other"):
        for i in range(2):
            store.register(NewJob(f"{queue}-{i}", queue, "charge", {"args": [], "kwargs": {}, "options": {}}))
    store.claim("billing-1", worker_id="w", lease_ttl=60)  # RUNNING: not cleared


def test_the_rate_says_its_window_and_clear_pending_counts_first(store: StateStore, tokens: Tokens) -> None:
    _jobs(store)
    viewer, _ = session(store, tokens.viewer)
    with viewer:
        page = viewer.get("/queues").text
    assert "Finished per hour <span class=\"meta\">(avg over 24 h)</span>" in page and "Clear pending" not in page
    operator, csrf = session(store, tokens.operator)  # scoped to queue billing
    with operator:
        page = operator.get("/queues").text
        billing = page.split('data-queue="billing"')[1].split("</tr>")[0]
        other = page.split('data-queue="other"')[1].split("</tr>")[0]
        assert "Clear pending" in billing and "Clear pending" not in other and "<form" not in billing  # links only
        actions = operator.get("/queues/billing/actions").text
        assert "Count the 1 pending" in actions and 'name="csrf_token"' in actions
        assert "Count the" not in operator.get("/queues/other/actions").text  # not its queue: no form
        preview = operator.post("/bulk", data={"view": "jobs", "queue": "billing", "state": "PENDING",
                                               "command": "cancel", "scope": "filter", "reason": "duplicates",
                                               "csrf_token": csrf})
    assert preview.status_code == 200 and "Confirm: cancel 1 job" in preview.text, preview.text[-2000:]
    assert "billing-0" in preview.text and "billing-1" not in preview.text
    assert store.get("billing-0").status is JobStatus.PENDING  # counted, nothing changed before the confirmation
