"""The limits' hot path (acquire, bind, release, take a token) costs one pooled connection per call
on every database, as when it used the store's runner directly: the unit of work adds none."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from reliable.limits import Limits, limit_spec
from reliable.limits.storage import LimitStore
from reliable.store import NewJob, StateStore

from support import Clock, pool_checkouts


@pytest.fixture
def checkouts(clocked: tuple[StateStore, Clock]) -> Iterator[list[object]]:
    """Every connection checked out of the store's pool while the test runs."""
    with pool_checkouts(clocked[0].engine) as taken:
        yield taken


def test_each_step_of_the_hot_path_is_one_checkout(clocked: tuple[StateStore, Clock],
                                                    checkouts: list[object]) -> None:
    store, _clock = clocked
    spec = limit_spec("call_api", Limits(concurrency=1, rate="10/1s"))
    assert spec is not None
    store.register_many([NewJob("a", queue="q", actor="call_api", message={"args": []})])
    limits = LimitStore(store, rand=lambda: 0.0)
    limits.ensure(spec, "")  # once per ENSURE_EVERY per process, not per message
    checkouts.clear()
    taken = limits.acquire(spec, "", "a", ttl=30.0)
    assert taken.slot == 0 and len(checkouts) == 1
    assert limits.bind(spec, "", 0, "a", 5) and len(checkouts) == 2
    limits.release(spec, "", 0, "a")
    assert len(checkouts) == 3
    assert limits.take_token(spec, "").taken and len(checkouts) == 4


def test_a_job_id_of_the_longest_allowed_length_takes_a_slot(store: StateStore) -> None:
    """Every id `reliable.inputs` allows (up to MAX_JOB_ID characters) can hold a concurrency slot: on
    PostgreSQL holder_job was VARCHAR(64), and a longer id's claim failed at every delivery."""
    from reliable.inputs import MAX_JOB_ID

    spec = limit_spec("call_api", Limits(concurrency=1))
    assert spec is not None
    job_id = "invoice-" + "f" * (MAX_JOB_ID - len("invoice-"))
    store.register(NewJob(job_id, queue="q", actor="call_api", message={"args": []}))
    limits = LimitStore(store, rand=lambda: 0.0)
    taken = limits.acquire(spec, "", job_id, ttl=30.0)
    assert taken.slot == 0
    limits.release(spec, "", 0, job_id)
    assert limits.acquire(spec, "", "other", ttl=30.0).slot == 0  # released: free again
