"""The queues page's failure rate counts what the error-budget alerts count (issue 41, item 5):
FAILED (in the window), DEAD and REVIEW (now) among those and SUCCEEDED (in the window), its window
stated; "per hour" says it is an average over the window.

Measured on main: payments with 8 of 30 jobs in REVIEW showed "Failure rate 0.0 %" while the
burn-rate alert for the same actor paged at 26.7x (a 26.7 % error ratio, SLO 99 %).
"""

from __future__ import annotations

from reliable.queue_pauses import QueueState, queue_figures
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.store.overview import Overview

from web_support import Tokens, bearer, session


def test_failure_rate_counts_review_and_dead_beside_failed() -> None:
    counts = {("SUCCEEDED", "payments"): 22, ("REVIEW", "payments"): 8, ("CANCELLED", "payments"): 5,
              ("SUCCEEDED", "mail"): 6, ("FAILED", "mail"): 1, ("DEAD", "mail"): 1, ("RUNNING", "idle"): 2}
    figures = queue_figures(Overview(now=1000.0, window=86400.0, counts=counts), QueueState((), 1000.0))
    rows = {row["queue"]: row for row in figures["queues"]}
    assert rows["payments"]["failure_rate"] == 0.2667  # 8 / (22 + 8): the burn alert's 26.7x at SLO 99 %
    assert rows["mail"]["failure_rate"] == 0.25
    assert rows["idle"]["failure_rate"] is None


def test_queues_page_states_the_rate_and_its_window(store: StateStore, tokens: Tokens) -> None:
    for i in range(30):
        store.register(NewJob(job_id=f"pay-{i}", queue="payments", actor="charge", message={}))
        claim = store.claim(f"pay-{i}", worker_id="w", lease_ttl=60)
        store.finish(f"pay-{i}", claim.lease_id, Event.NEED_REVIEW if i < 8 else Event.SUCCEED, worker_id="w")
    client, _ = session(store, tokens.viewer)
    with client:
        page = client.get("/queues").text
    assert "26.7%" in page and 'Failure rate <span class="meta">(24 h)</span>' in page, page
    assert 'Finished per hour <span class="meta">(avg over 24 h)</span>' in page, page


def test_the_rate_counts_successes_and_failures_from_the_jobs_alike(store: StateStore, tokens: Tokens) -> None:
    """One success and one failure seconds ago: 50 %, at once (review 3: SUCCEEDED read from the
    workers' aggregates and FAILED from the jobs showed 100 % until a worker flushed its figures)."""
    for n, event in enumerate((Event.SUCCEED, Event.FAIL)):
        store.register(NewJob(f"p{n}", queue="pay", actor="x", message={}))
        claim = store.claim(f"p{n}", worker_id="w", lease_ttl=60)
        store.finish(f"p{n}", claim.lease_id, event, worker_id="w")
    client, _ = session(store, tokens.viewer)
    with client:
        rows = client.get("/api/v1/queues", headers=bearer(tokens.viewer)).json()["queues"]
    (row,) = [r for r in rows if r["queue"] == "pay"]
    assert row["failure_rate"] == 0.5 and row["finished"] == 2, row
    assert row["throughput_per_hour"] == round(2 * 3600 / 86_400, 3)  # the 24 h window's jobs over 24 h
