"""The store's public unit of work (StateStore.transaction / run / rows / one) on every database:
what commits together, what a rollback leaves, when listeners hear of registered jobs, and the
errors a wrong query name or a missing parameter gives."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from reliable.errors import NamedQueryError
from reliable.store import NewJob, StateStore

from support import Clock, pool_checkouts


def _job(job_id: str | None = None) -> NewJob:
    job_id = job_id or str(uuid.uuid4())
    return NewJob(job_id=job_id, queue="q", actor="act", message={"message_id": job_id, "args": []})


class _Boom(Exception):
    pass


@pytest.fixture
def heard(store: StateStore) -> list[dict[str, Any]]:
    """The events the store's listeners are given, in order."""
    events: list[dict[str, Any]] = []
    store.add_listener(events.append)
    return events


@pytest.fixture
def checkouts(store: StateStore) -> Iterator[list[object]]:
    """Every connection checked out of the store's pool while the test runs."""
    with pool_checkouts(store.engine) as taken:
        yield taken


def test_a_unit_commits_its_statements_and_registrations_together(store: StateStore,
                                                                    heard: list[dict[str, Any]]) -> None:
    job = _job()
    barrier = f"b-{uuid.uuid4()}"
    with store.transaction() as unit:
        assert unit.register([job]) == 1
        assert unit.one("create_barrier", {"barrier_id": barrier, "parties": 2}) == (barrier,)
        # Read back inside the same transaction: the unit's statements see its own writes.
        assert (unit.one("job_status", {"job_id": job.job_id}) or ())[:1] == ("PENDING",)
    assert store.get(job.job_id).status.value == "PENDING"
    assert store.create_barrier(barrier, 2) is False  # committed with the job
    assert [(e["event"], e["job_id"]) for e in heard] == [("enqueued", job.job_id)]


def test_listeners_hear_of_registered_jobs_only_after_the_commit(store: StateStore,
                                                                 heard: list[dict[str, Any]]) -> None:
    first, second = _job(), _job()
    with store.transaction() as unit:
        unit.register([first])
        unit.register([second])
        assert heard == []  # nothing is told before the commit
    assert sorted(e["job_id"] for e in heard) == sorted([first.job_id, second.job_id])
    assert {e["event"] for e in heard} == {"enqueued"}


def test_an_exception_rolls_everything_back_and_tells_no_listener(store: StateStore,
                                                                  heard: list[dict[str, Any]]) -> None:
    job = _job()
    barrier = f"b-{uuid.uuid4()}"
    with pytest.raises(_Boom), store.transaction() as unit:
        unit.register([job])
        unit.run("create_barrier", {"barrier_id": barrier, "parties": 1})
        raise _Boom
    assert store.find(job.job_id) is None
    assert store.create_barrier(barrier, 1) is True  # the first one was rolled back
    assert heard == []


def test_registering_a_known_job_again_counts_nothing_and_emits_nothing(store: StateStore,
                                                                        heard: list[dict[str, Any]]) -> None:
    job = _job()
    store.register(job)
    heard.clear()
    with store.transaction() as unit:
        assert unit.register([job, _job()]) == 1
        assert unit.register([]) == 0
    assert len(heard) == 1 and heard[0]["job_id"] != job.job_id


def test_single_statements_run_alone(store: StateStore) -> None:
    job = _job()
    store.register(job)
    assert (store.one("job_status", {"job_id": job.job_id}) or ())[:1] == ("PENDING",)
    assert store.one("job_status", {"job_id": "missing"}) is None
    assert [row[:1] for row in store.rows("job_status", {"job_id": job.job_id})] == [("PENDING",)]
    barrier = f"b-{uuid.uuid4()}"
    store.run("create_barrier", {"barrier_id": barrier, "parties": 3})
    assert store.create_barrier(barrier, 3) is False


def test_a_list_parameter_is_an_array_on_every_database(store: StateStore) -> None:
    # PostgreSQL takes the list as an array, SQLite as JSON text for json_each: the same call works on both.
    assert store.rows("limit_holders", {"name": "nobody", "active": ["RUNNING", "STOPPING"]}) == []


def test_one_pooled_connection_per_unit_and_per_statement(store: StateStore, checkouts: list[object]) -> None:
    store.check_schema()
    checkouts.clear()
    with store.transaction() as unit:
        for _ in range(3):
            unit.one("job_status", {"job_id": "missing"})
        unit.register([_job()])
    assert len(checkouts) == 1
    store.one("job_status", {"job_id": "missing"})
    assert len(checkouts) == 2


def test_an_unknown_query_name_is_a_clear_error_before_anything_runs(store: StateStore,
                                                                     heard: list[dict[str, Any]]) -> None:
    with pytest.raises(NamedQueryError, match=r"no named query 'job_stat' in (postgresql|sqlite)\.sql "
                                              r"\(did you mean job_status"):
        store.one("job_stat", {"job_id": "x"})
    job = _job()
    with pytest.raises(NamedQueryError, match="no named query 'no_such_query'"), store.transaction() as unit:
        unit.register([job])
        unit.run("no_such_query")
    assert store.find(job.job_id) is None  # the error rolled the unit back
    assert heard == []


def test_a_missing_parameter_is_a_clear_error(store: StateStore) -> None:
    with pytest.raises(NamedQueryError, match=r"'create_barrier' needs the parameters \['parties'\]"):
        store.run("create_barrier", {"barrier_id": "b"})
    with pytest.raises(NamedQueryError, match=r"needs the parameters \['job_id'\]"):
        store.one("job_status")


def test_the_units_time_is_fixed_once_and_shared(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    with store.transaction() as unit:
        assert unit.now() == clock.now
        clock.now += 50  # the unit keeps the time it fixed
        assert unit.now() == clock.now - 50
        job = _job()
        unit.register([job])
    assert store.get(job.job_id).created_at == clock.now - 50


def test_use_now_sets_the_time_later_statements_write(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    job = _job()
    with store.transaction() as unit:
        unit.use_now(clock.now - 3600)
        unit.register([job])
    assert store.get(job.job_id).created_at == clock.now - 3600


def test_the_dialect_is_the_stores(store: StateStore) -> None:
    with store.transaction() as unit:
        assert unit.dialect == store.dialect
