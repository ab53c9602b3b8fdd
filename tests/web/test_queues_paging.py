"""Issue 42, at scale: GET /api/v1/queues and the console's queues page a page at a time (?limit=,
?cursor=, ?search=), wait and run p50/p95 read for the page's queues only, and the oldest due
PENDING job per queue read by one loose index scan, on SQLite and PostgreSQL (small data: the
big numbers are bench/console.py's)."""

from __future__ import annotations

from sqlalchemy import select, union_all, update

from reliable import queue_pauses
from reliable.operators import Operator
from reliable.states import JobStatus
from reliable.store import NewJob, StateStore
from reliable.store.job_stats import COLUMNS, latency, write_stats
from reliable.store.overview import OVERVIEW_QUEUES, oldest_pending_query, overview
from reliable.store.schema import jobs

from support import Clock
from web_support import Tokens, bearer, session

QUEUES = [f"q{n:02d}" for n in range(7)]


def _fill(store: StateStore) -> None:
    store.register_many([NewJob(f"{queue}-{n}", queue, "work", {"args": [], "kwargs": {}, "options": {}})
                         for queue in QUEUES for n in range(2)])


def test_the_api_pages_through_the_queues(store: StateStore, tokens: Tokens) -> None:
    _fill(store)
    queue_pauses.pause(store, "zz-paused", reason="maintenance", identity=Operator("ada", "h", "test"))
    client, _ = session(store, tokens.viewer)
    headers = bearer(tokens.viewer)
    seen, cursor, pages = [], None, 0
    with client:
        while True:
            params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
            body = client.get("/api/v1/queues", params=params, headers=headers).json()
            assert body["total"] == 8 and len(body["queues"]) <= 3
            seen += [row["queue"] for row in body["queues"]]
            pages += 1
            cursor = body["next_cursor"]
            if cursor is None:
                break
        assert seen == [*QUEUES, "zz-paused"] and pages == 3  # every queue once, by name, paused ones too
        found = client.get("/api/v1/queues", params={"search": "Q0"}, headers=headers).json()
        assert found["total"] == 7 and found["next_cursor"] is None  # case-insensitive part of a name
        assert client.get("/api/v1/queues", params={"limit": "0"}, headers=headers).status_code == 400
        assert client.get("/api/v1/queues", params={"page": "2"}, headers=headers).status_code == 400
        for name, bad in (("cursor", "q" * 256), ("cursor", "q\x00"), ("search", "s" * 256), ("search", "a\x1bb")):
            answer = client.get("/api/v1/queues", params={name: bad}, headers=headers)
            assert answer.status_code == 400 and repr(name) in answer.text, (name, bad, answer.text)
            page = client.get("/queues", params={name: bad})
            assert page.status_code == 400, (name, bad)
        everything = client.get("/api/v1/queues", headers=headers).json()  # the default page holds them all
        assert [row["queue"] for row in everything["queues"]] == seen and everything["next_cursor"] is None


def test_latency_is_read_for_the_page_s_queues(store: StateStore, tokens: Tokens) -> None:
    _fill(store)
    minute = int(store.now() // 60 * 60)
    counts = [0.0] * len(COLUMNS)
    counts[COLUMNS.index("succeeded")], counts[COLUMNS.index("wait_sum")], counts[COLUMNS.index("run_sum")] = 1, .3, 2
    counts[COLUMNS.index("w09")] = 1.0  # one wait in the 0.256..0.512 s bucket
    counts[COLUMNS.index("r11")] = 1.0  # one run in the 1.024..2.048 s bucket
    write_stats(store, {(minute, queue, "work"): list(counts) for queue in QUEUES})
    client, _ = session(store, tokens.viewer)
    with client:
        body = client.get("/api/v1/queues", params={"limit": "2", "cursor": "q02"},
                          headers=bearer(tokens.viewer)).json()
    assert [row["queue"] for row in body["queues"]] == ["q03", "q04"]
    for queue_row in body["queues"]:
        assert queue_row["latency"]["wait"]["count"] == 1 and queue_row["latency"]["run"]["count"] == 1
        assert 0.256 <= queue_row["latency"]["wait"]["p50_seconds"] <= 0.512


def test_the_queues_page_links_its_next_page(store: StateStore, tokens: Tokens) -> None:
    _fill(store)
    client, _ = session(store, tokens.viewer)
    with client:
        first = client.get("/queues", params={"limit": "4"})
        assert first.status_code == 200 and 'data-queue="q03"' in first.text and 'data-queue="q04"' not in first.text
        assert "4 of 7 queues" in first.text
        after = client.get("/queues", params={"limit": "4", "cursor": "q03"})
        assert 'data-queue="q04"' in after.text and 'data-queue="q03"' not in after.text
        assert 'rel="next"' not in after.text and "First page" in after.text
        found = client.get("/queues", params={"search": "q05"})
        assert 'data-queue="q05"' in found.text and "1 of 1 queue" in found.text


def _union_per_queue(store: StateStore, now: float) -> dict[str, float | None]:
    """The read as it was before issue 42's scale work: one UNION branch per queue."""
    from sqlalchemy import func, literal

    branches = [select(literal(q).label("queue"), func.min(jobs.c.scheduled_at).label("oldest"))
                .where(jobs.c.status == JobStatus.PENDING.value, jobs.c.queue == q, jobs.c.scheduled_at <= now)
                for q in QUEUES]
    with store.read() as conn:
        return {row.queue: row.oldest for row in conn.execute(union_all(*branches))}


def test_oldest_pending_reads_as_the_union_did(store_url: str) -> None:
    clock = Clock()
    store = StateStore(store_url, clock=clock)
    try:
        _fill(store)
        with store.write() as conn:  # q00: both due; q01: one due, one later; q02: both later; q03: none PENDING
            for job_id, at in (("q00-0", clock.now - 50), ("q00-1", clock.now - 70), ("q01-0", clock.now + 30),
                               ("q01-1", clock.now - 5), ("q02-0", clock.now + 60), ("q02-1", clock.now + 90)):
                conn.execute(update(jobs).where(jobs.c.job_id == job_id).values(scheduled_at=at))
        for job_id in ("q03-0", "q03-1"):
            store.claim(job_id, worker_id="w", lease_ttl=60)
        before = _union_per_queue(store, clock.now)
        with store.read() as conn:
            now_read = {str(q): v for q, v in conn.execute(oldest_pending_query(clock.now))}
        assert now_read == {q: v for q, v in before.items() if q != "q03"}  # q03 has no PENDING job
        assert now_read["q00"] == clock.now - 70 and now_read["q01"] == clock.now - 5 and now_read["q02"] is None
        assert overview(store).oldest_pending == before  # the overview still names every counted queue
    finally:
        store.close()


def test_latency_of_the_busiest_pairs_and_of_some_queues(store: StateStore) -> None:
    minute = int(store.now() // 60 * 60)

    def counted(n: int) -> list[float]:
        row = [0.0] * len(COLUMNS)
        row[COLUMNS.index("succeeded")] = row[COLUMNS.index("r05")] = float(n)
        return row

    write_stats(store, {(minute, "a", "x"): counted(5), (minute, "a", "y"): counted(1), (minute, "b", "x"): counted(3)})
    every = latency(store, window="1h")
    assert set(every.actors) == {("a", "x"), ("a", "y"), ("b", "x")} and every.actors_total == 3
    busiest = latency(store, window="1h", actors=2)  # summed and ranked by the database
    assert set(busiest.actors) == {("a", "x"), ("b", "x")} and busiest.actors_total == 3
    assert busiest.queues == every.queues and busiest.overall == every.overall
    some = latency(store, window="1h", queues=["b"], actors=0)
    assert set(some.queues) == {"b"} and some.actors == {} and some.queues["b"] == every.queues["b"]
    assert some.overall == every.overall  # all queues' figures whatever the page
    assert busiest.as_dict()["actors_total"] == 3



def test_the_overview_api_lists_the_busiest_queues_and_points_to_the_rest(store: StateStore, tokens: Tokens) -> None:
    """GET /api/v1/overview carries the counts of the queues the overview page shows (the busiest
    OVERVIEW_QUEUES), `queues_total` and `queues_url` (issue 42: 848 KB at 2,000 queues)."""
    names = [f"q{n:02d}" for n in range(OVERVIEW_QUEUES + 1)]  # one job each; zz-busy has three
    store.register_many([NewJob(f"{queue}-{n}", queue, "work", {"args": [], "kwargs": {}, "options": {}})
                         for queue in [*names, "zz-busy"] for n in range(3 if queue == "zz-busy" else 1)])
    client, _ = session(store, tokens.viewer)
    with client:
        body = client.get("/api/v1/overview", headers=bearer(tokens.viewer)).json()
    assert body["queues"] == [*names[:OVERVIEW_QUEUES - 1], "zz-busy"]  # the busiest, then by name
    assert body["queues_total"] == OVERVIEW_QUEUES + 2 and body["queues_url"] == "/api/v1/queues"
    assert {c["queue"] for c in body["counts"]} == set(body["queues"]) == set(body["oldest_pending"])
    assert body["by_state"] == {"PENDING": OVERVIEW_QUEUES + 4}  # every queue's


def test_a_page_may_end_at_a_queue_named_with_spaces(store: StateStore, tokens: Tokens) -> None:
    """Registration does not judge queue names: a page that ends at a queue named " " hands it out
    as its cursor, and the next page takes it back."""
    store.register_many([NewJob(f"{queue}-0", queue, "work", {"args": [], "kwargs": {}, "options": {}})
                         for queue in (" ", "q-after")])
    client, _ = session(store, tokens.viewer)
    headers = bearer(tokens.viewer)
    with client:
        first = client.get("/api/v1/queues", params={"limit": "1"}, headers=headers).json()
        assert [row["queue"] for row in first["queues"]] == [" "] and first["next_cursor"] == " "
        after = client.get("/api/v1/queues", params={"limit": "1", "cursor": " "}, headers=headers)
        assert after.status_code == 200 and [row["queue"] for row in after.json()["queues"]] == ["q-after"]
        # Spaces pass as a name does, up to a name's length.
        assert client.get("/api/v1/queues", params={"cursor": " " * 256}, headers=headers).status_code == 400
