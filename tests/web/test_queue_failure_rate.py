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
from reliable.store.job_stats import StatsBuffer, write_stats
from reliable.store.overview import Overview

from web_support import Tokens, session


def test_failure_rate_counts_review_and_dead_beside_failed() -> None:
    counts = {("SUCCEEDED", "payments"): 22, ("REVIEW", "payments"): 8, ("CANCELLED", "payments"): 5,
              ("SUCCEEDED", "mail"): 6, ("FAILED", "mail"): 1, ("DEAD", "mail"): 1, ("RUNNING", "idle"): 2}
    figures = queue_figures(Overview(now=1000.0, window=86400.0, counts=counts), QueueState((), 1000.0))
    rows = {row["queue"]: row for row in figures["queues"]}
    assert rows["payments"]["failure_rate"] == 0.2667  # 8 / (22 + 8): the burn alert's 26.7x at SLO 99 %
    assert rows["mail"]["failure_rate"] == 0.25
    assert rows["idle"]["failure_rate"] is None


def test_queues_page_states_the_rate_and_its_window(store: StateStore, tokens: Tokens) -> None:
    buffer = StatsBuffer()  # the SUCCEEDED counts are the workers' aggregates (as a worker flushes them)
    store.add_listener(buffer)
    for i in range(30):
        store.register(NewJob(job_id=f"pay-{i}", queue="payments", actor="charge", message={}))
        claim = store.claim(f"pay-{i}", worker_id="w", lease_ttl=60)
        store.finish(f"pay-{i}", claim.lease_id, Event.NEED_REVIEW if i < 8 else Event.SUCCEED, worker_id="w")
    write_stats(store, buffer.take())
    client, _ = session(store, tokens.viewer)
    with client:
        page = client.get("/queues").text
    assert "26.7%" in page and 'Failure rate <span class="meta">(24 h)</span>' in page, page
    assert 'Finished per hour <span class="meta">(avg over 24 h)</span>' in page, page
