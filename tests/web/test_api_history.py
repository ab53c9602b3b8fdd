"""The latency and outcome history (reliable.store.job_stats) on each store: what the worker's
listener counts, p50/p95 from the buckets, the 1 h / 24 h / 7 d series, the API's new fields
(overview: retry_wait, scheduled, latency, history; queues: latency), the bound and the prune."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from reliable.access import ApiTokens
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.job_stats import (
    EDGES,
    RESOLUTIONS,
    StatsBuffer,
    history,
    latency,
    prune_stats,
    quantile,
    write_stats,
)
from reliable.store.schema import job_stats
from reliable.web import WebConfig, create_app

from support import Clock
from web_support import bearer

T0 = 1_900_000_020.0  # a minute starts: every event below falls in the same minute


@pytest.fixture
def clocked(store_url: str) -> Iterator[tuple[StateStore, Clock, StatsBuffer]]:
    clock = Clock()
    clock.now = T0
    store = StateStore(store_url, clock=clock)
    counted = StatsBuffer()
    store.add_listener(counted)
    yield store, clock, counted
    store.close()


def run(store: StateStore, clock: Clock, job_id: str, *, queue: str, actor: str, wait: float, took: float,
        event: Event = Event.SUCCEED) -> None:
    """A job due at the clock's time, claimed `wait` s later, ended with `event` `took` s after that."""
    start = clock.now
    store.register(NewJob(job_id, queue, actor, {"args": [], "kwargs": {}, "options": {}}))
    clock.now = start + wait
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    clock.now = start + wait + took
    store.finish(job_id, claim.lease_id, event, worker_id="w1", retry_delay=30.0 if event is Event.RETRY else None,
                 error=None if event is Event.SUCCEED else ErrorInfo("transient", "TimeoutError", "slow"))
    clock.now = start


def test_latency_and_outcomes_come_from_the_buckets(clocked: tuple[StateStore, Clock, StatsBuffer]) -> None:
    store, clock, counted = clocked
    for n in range(17):
        run(store, clock, f"fast-{n}", queue="exports", actor="export", wait=0.1, took=0.2)
    for n in range(2):
        run(store, clock, f"slow-{n}", queue="exports", actor="export", wait=3.0, took=5.0)
    run(store, clock, "failed", queue="exports", actor="export", wait=0.1, took=0.2, event=Event.FAIL)
    run(store, clock, "retried", queue="billing", actor="invoice", wait=0.1, took=0.2, event=Event.RETRY)
    # (queue, actor), each queue's total and all queues', in each resolution.
    assert write_stats(store, counted.take()) == 5 * len(RESOLUTIONS)
    clock.now = T0 + 30
    figures = latency(store, window="1h")
    exports = figures.queues["exports"]
    assert exports["outcomes"] == {"succeeded": 19, "failed": 1, "retried": 0, "other": 0}
    assert figures.queues["billing"]["outcomes"]["retried"] == 1
    assert figures.actors[("exports", "export")]["wait"]["count"] == 20
    # 0.1 s waits and 0.2 s runs, within a factor of two (the buckets double); the slow tenth is p95's.
    assert 0.064 < exports["wait"]["p50_seconds"] <= 0.128 and 0.128 < exports["run"]["p50_seconds"] <= 0.256
    assert 2.048 <= exports["wait"]["p95_seconds"] <= 4.096 and 4.096 <= exports["run"]["p95_seconds"] <= 8.192
    assert figures.overall["run"]["mean_seconds"] == pytest.approx((19 * 0.2 + 2 * 5.0) / 21, rel=1e-4)
    # A second flush adds to the rows (the upsert), it does not replace them.
    run(store, clock, "later", queue="exports", actor="export", wait=0.1, took=0.2)
    write_stats(store, counted.take())
    assert latency(store, window="1h").queues["exports"]["outcomes"]["succeeded"] == 20
    # The windows: 60 one-minute, 96 quarter-hour or 168 hour buckets, the same totals.
    for window, (count, resolution) in {"1h": (60, 60), "24h": (96, 900), "7d": (168, 3600)}.items():
        series = history(store, window=window)
        assert (len(series.buckets), series.resolution) == (count, resolution)
        assert sum(series.outcomes["succeeded"]) == 20 and sum(series.outcomes["retried"]) == 1
        assert series.buckets[-1] <= clock.now < series.buckets[-1] + resolution
    # Two hours later the 1 h window (60 to 75 minutes) is empty, the 24 h one is not.
    clock.now = T0 + 2 * 3600
    assert latency(store, window="1h").overall["run"]["count"] == 0
    assert latency(store, window="24h").overall["run"]["count"] == 22


def test_quantiles_interpolate_inside_a_bucket() -> None:
    histogram = [0.0] * (len(EDGES) + 1)
    assert quantile(histogram, 0.5) is None
    histogram[10] = 4  # four values in (0.512, 1.024]
    assert quantile(histogram, 0.5) == pytest.approx(0.512 + 0.512 * 0.5)
    histogram[-1] = 100  # above the last edge: a lower bound
    assert quantile(histogram, 0.99) == EDGES[-1]


def test_rows_past_their_horizon_and_before_a_prune_cut_are_deleted(
        clocked: tuple[StateStore, Clock, StatsBuffer]) -> None:
    store, clock, counted = clocked
    run(store, clock, "old", queue="exports", actor="export", wait=0.1, took=0.2)
    write_stats(store, counted.take())
    levels = 3  # (queue, actor), the queue's total, all queues'
    clock.now = T0 + 3 * 3600  # past the minute rows' 2 h
    assert prune_stats(store) == levels
    clock.now = T0 + 26 * 3600  # past the quarter-hour rows' 25 h
    assert prune_stats(store) == levels
    assert prune_stats(store, cut=T0 + 7200) == levels  # a history prune's cut takes the hour rows with it
    with store.read() as conn:
        assert {row.resolution for row in conn.execute(job_stats.select())} == {86400}
    clock.now = T0 + 9 * 86400  # past the day rows' 8 days
    assert prune_stats(store) == levels
    with store.read() as conn:
        assert conn.execute(job_stats.select()).first() is None


def test_the_api_answers_the_new_fields(clocked: tuple[StateStore, Clock, StatsBuffer]) -> None:
    store, clock, counted = clocked
    run(store, clock, "done", queue="exports", actor="export", wait=0.1, took=0.2)
    run(store, clock, "retried", queue="exports", actor="export", wait=0.1, took=0.2, event=Event.RETRY)
    store.register(NewJob("later", "exports", "export", {"args": [], "kwargs": {}, "options": {}},
                          delay=600.0))
    write_stats(store, counted.take())
    clock.now = T0 + 1
    _, token = ApiTokens(store).create("ada", "viewer")
    client = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    body = client.get("/api/v1/overview?window=24h", headers=bearer(token)).json()
    assert (body["retry_wait"], body["scheduled"]) == (1, 1)
    assert body["latency"]["window_seconds"] == 3600
    assert body["latency"]["all"]["outcomes"] == {"succeeded": 1, "failed": 0, "retried": 1, "other": 0}
    assert [row["queue"] for row in body["latency"]["queues"]] == ["exports"]
    assert body["latency"]["actors"][0]["actor"] == "export"
    assert body["latency"]["all"]["run"]["p50_seconds"] > 0
    assert body["history"]["resolution_seconds"] == 900 and len(body["history"]["buckets"]) == 96
    assert sum(body["history"]["succeeded"]) == 1
    assert client.get("/api/v1/overview", headers=bearer(token)).json()["history"]["window"] == "1h"
    refused = client.get("/api/v1/overview?window=2d", headers=bearer(token))
    assert refused.status_code == 400 and "'window' must be one of 1h, 24h, 7d" in refused.text
    (row,) = client.get("/api/v1/queues", headers=bearer(token)).json()["queues"]
    assert row["latency"]["wait"]["count"] == 2 and row["latency"]["run"]["p95_seconds"] is not None
