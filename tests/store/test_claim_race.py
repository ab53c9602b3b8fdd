"""16 threads race to claim the same PENDING job, 250 times over (1,000 with --soak; RELIABLE_RACES):
exactly one wins each race."""

from __future__ import annotations

import os
import threading
from collections import Counter

import pytest

from reliable.errors import ClaimRefused
from reliable.store import NewJob, StateStore

THREADS = 16


@pytest.fixture
def races(request: pytest.FixtureRequest) -> int:
    """How many races: 250 (each a barrier of 16 threads: 4,000 contested claims), 1,000 with --soak."""
    soak = bool(request.config.getoption("--soak", default=False))
    return int(os.environ.get("RELIABLE_RACES") or (1000 if soak else 250))


def run_races(url: str, races: int) -> None:
    setup = StateStore(url)
    setup.register_many([NewJob(f"race-{i}", "default", "noop", {}) for i in range(races)])
    stores = [StateStore(url, max_connections=1) for _ in range(THREADS)]
    barrier = threading.Barrier(THREADS)
    wins: Counter[str] = Counter()
    refusals: Counter[str] = Counter()
    errors: list[BaseException] = []
    lock = threading.Lock()

    def contender(index: int) -> None:
        store = stores[index]
        for race in range(races):
            job_id = f"race-{race}"
            barrier.wait()
            try:
                store.claim(job_id, worker_id=f"w{index}", lease_ttl=60)
            except ClaimRefused as exc:
                with lock:
                    refusals[exc.reason] += 1
            except BaseException as exc:  # anything else (e.g. "database is locked") fails the test
                with lock:
                    errors.append(exc)
            else:
                with lock:
                    wins[job_id] += 1

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()

    assert errors == []
    assert len(wins) == races and set(wins.values()) == {1}, "exactly one winner per race"
    assert refusals == Counter({"held": races * (THREADS - 1)})
    claims = Counter()
    for race in range(races):
        job_id = f"race-{race}"
        events = [e for e in setup.events(job_id) if e.event == "claim"]
        claims[len(events)] += 1
        job = setup.get(job_id)
        assert job.lease_id == 1 and job.attempt == 1 and job.version == 2
    assert claims == Counter({1: races}), "the history shows one claim per win"
    setup.close()


def test_claim_race_postgresql(pg_store: StateStore, races: int) -> None:
    run_races(str(pg_store.engine.url.render_as_string(hide_password=False)), races)


def test_claim_race_sqlite(sqlite_url: str, races: int) -> None:
    run_races(sqlite_url, races)
