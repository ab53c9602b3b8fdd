"""One bounded pool per store: a thread never holds two connections, extra threads wait, a full pool
for too long is StoreUnavailable, and a database restart costs one error, not one per connection."""

from __future__ import annotations

import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest
from dramatiq.brokers.stub import StubBroker
from private_postgres import private_postgres
from sqlalchemy import event, text

import reliable
from reliable.control import Control
from reliable.errors import ClaimRefused, ConfigError, LeaseLost, StoreUnavailable, TransitionRefused
from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import Event, JobStatus
from reliable.store import NewJob, StateStore
from reliable.store.selection import JobFilter, Reader, count_jobs, select_jobs


def new_job(job_id: str) -> NewJob:
    return NewJob(job_id, "default", "export", {"args": [1]})


class CheckoutWatch:
    """Counts the connections each thread holds from one engine's pool; remembers any nesting."""

    def __init__(self, store: StateStore) -> None:
        self._held: dict[int, int] = defaultdict(int)
        self.nested: list[str] = []
        self.checkouts = 0
        event.listen(store.engine.pool, "checkout", self._checkout)
        event.listen(store.engine.pool, "checkin", self._checkin)

    def _checkout(self, *_: Any) -> None:
        me = threading.get_ident()
        self._held[me] += 1
        self.checkouts += 1
        if self._held[me] > 1:
            self.nested.append("".join(traceback.format_stack(limit=14)))

    def _checkin(self, *_: Any) -> None:
        self._held[threading.get_ident()] -= 1


@pytest.fixture
def tight_store(store_url: str) -> Iterator[StateStore]:
    """A store of ONE connection: any code path that nests a second checkout would wait, then fail."""
    store = StateStore(store_url, max_connections=1, pool_timeout=3.0)
    yield store
    store.close()


def test_no_store_path_holds_two_connections_at_once(tight_store: StateStore) -> None:
    store = tight_store
    watch = CheckoutWatch(store)
    store.register_many([new_job(f"j{i}") for i in range(6)])
    assert store.register(new_job("j0")) is False
    claim = store.claim("j0", worker_id="w", lease_ttl=30)
    with pytest.raises(ClaimRefused):
        store.claim("j0", worker_id="w2", lease_ttl=30)  # refused: the refusal reads the row
    assert set(store.renew("w", [("j0", claim.lease_id)], 30)) == {"j0"}
    store.save_checkpoint("j0", claim.lease_id, {"page": 1}, lease_ttl=30)
    assert store.record_effect("j0", claim.lease_id, "unit-1").applied
    assert not store.record_effect("j0", claim.lease_id, "unit-1").applied  # duplicate path
    with pytest.raises(LeaseLost):
        store.save_checkpoint("j0", claim.lease_id + 5, 2, lease_ttl=30)  # stale path
    with pytest.raises(LeaseLost):
        store.record_effect("j0", claim.lease_id + 5, "unit-2")
    with pytest.raises(LeaseLost):
        store.finish("j0", claim.lease_id + 5, Event.SUCCEED)
    store.finish("j0", claim.lease_id, Event.SUCCEED)
    with pytest.raises(TransitionRefused):
        store.transition("j0", Event.PAUSE)
    store.record_event("j0", "note")
    assert store.mark_dispatched(store.get("j1"))
    short = store.claim("j2", worker_id="w", lease_ttl=0.01)
    time.sleep(0.05)  # let the 10 ms lease expire by the database's clock
    control = Control(store)
    assert control.pause("j3", reason="test").ok and control.cancel("j4", reason="test").ok
    assert control.restart("j4", reason="test").ok
    assert count_jobs(store, JobFilter(statuses=(JobStatus.PENDING,)), reader=Reader.trusted()) >= 1
    assert select_jobs(store, JobFilter(queue="default"), reader=Reader.trusted())
    report = Recovery(store, None, Policy.load(None)).run_once()
    assert "j2" in report.expired, report
    late = store.finish("j2", short.lease_id, Event.SUCCEED)  # a late completion: nobody claimed it since
    assert late.status is JobStatus.SUCCEEDED
    for read in (lambda: store.find("j0"), lambda: store.events("j0"), lambda: store.attempts("j0"),
                 lambda: store.effects("j0"), lambda: store.list_jobs(), store.count_by_status,
                 lambda: store.expired_leases(), lambda: store.due_retries(grace=0),
                 lambda: store.stale_pending(age=0), lambda: store.stopping_past(0), store.now,
                 lambda: store.count_recent_events("succeed", window=60),
                 lambda: store.count_job_events("j0", "claim"), lambda: store.effect_recorded("j0", "unit-1")):
        read()
    assert watch.checkouts > 30
    assert watch.nested == [], "a second connection was checked out while holding one:\n" + watch.nested[0]


def test_threads_beyond_the_limit_wait_their_turn(store_url: str) -> None:
    store = StateStore(store_url, max_connections=2)
    store.register_many([new_job(f"t{i}") for i in range(160)])
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            for i in range(index, 160, 16):
                claim = store.claim(f"t{i}", worker_id=f"w{index}", lease_ttl=30)
                store.save_checkpoint(claim.job.job_id, claim.lease_id, 1, lease_ttl=30)
                store.finish(claim.job.job_id, claim.lease_id, Event.SUCCEED)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert store.count_by_status() == {JobStatus.SUCCEEDED: 160}
    assert store.engine.pool.checkedout() == 0 and store.engine.pool.checkedin() <= 2  # type: ignore[attr-defined]
    store.close()


def test_a_pool_busy_past_its_timeout_is_store_unavailable(store_url: str) -> None:
    store = StateStore(store_url, max_connections=1, pool_timeout=0.3)
    store.register(new_job("busy"))
    with store.engine.connect():  # the only connection, held by this thread
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="max_connections"):
            store.claim("busy", worker_id="w", lease_ttl=30)  # hot path
        with pytest.raises(StoreUnavailable, match="max_connections"):
            store.get("busy")  # general path
        assert time.monotonic() - started < 3
    assert store.claim("busy", worker_id="w", lease_ttl=30).lease_id == 1  # free again: works
    store.close()


def test_hot_path_returns_connections_in_transaction_mode(pg_store: StateStore) -> None:
    store = StateStore(pg_store.engine.url.render_as_string(hide_password=False), max_connections=1)
    store.register(new_job("mode"))
    claim = store.claim("mode", worker_id="w", lease_ttl=30)
    store.finish("mode", claim.lease_id, Event.SUCCEED)
    with store.engine.connect() as conn:  # the very connection the hot path used
        assert conn.connection.driver_connection.autocommit is False  # type: ignore[union-attr]
        conn.execute(text("UPDATE reliable_jobs SET owner = 'x' WHERE job_id = 'mode'"))
        conn.rollback()
    assert store.get("mode").owner is None  # a transaction: the rollback undid it
    store.close()


@pytest.mark.integration
def test_a_database_restart_fails_no_call_stale_connections_are_replaced_at_checkout() -> None:
    with private_postgres() as pg:
        store = StateStore(pg.create_database("store"), max_connections=4)
        store.upgrade()
        store.register_many([new_job(f"r{i}") for i in range(8)])
        barrier = threading.Barrier(4)

        def hold_one(job: str) -> None:
            with store.engine.connect():
                barrier.wait(10)  # all four connections open at once: the pool keeps four
            store.claim(job, worker_id="w", lease_ttl=30)

        threads = [threading.Thread(target=hold_one, args=(f"r{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20)
        assert store.engine.pool.checkedin() == 4  # type: ignore[attr-defined]
        pg.stop()
        pg.start()
        for job in ("r4", "r5", "r6", "r7"):  # hot path: each checkout meets a connection the server closed
            assert store.claim(job, worker_id="w", lease_ttl=30).lease_id == 1
        pg.stop()
        pg.start()
        assert store.record_effect("r4", 1, "unit").applied  # general path, a write transaction
        assert store.count_by_status() == {JobStatus.RUNNING: 8}
        store.close()


def test_a_disconnect_inside_a_write_transaction_is_store_unavailable(pg_store: StateStore) -> None:
    with pytest.raises(StoreUnavailable), pg_store.write() as conn:
        conn.execute(text("SELECT pg_terminate_backend(pg_backend_pid())"))
    pg_store.register(new_job("after"))  # the pool recovered
    assert pg_store.get("after").status is JobStatus.PENDING


def test_middleware_passes_the_limit_to_each_process_store(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'limit.db'}"
    StateStore(url).upgrade()
    broker = StubBroker()
    middleware = reliable.install(broker, store=url, max_connections=3, metrics=False, json_logs=False)
    assert middleware.store.max_connections == 3
    assert middleware.store.engine.pool.size() == 3  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="at least 1"):
        reliable.install(StubBroker(), store=url, max_connections=0)
    with pytest.raises(ConfigError, match="StateStore"):
        reliable.install(StubBroker(), store=StateStore(url), max_connections=3)
    assert StateStore(url).max_connections == 10  # the documented default
    middleware.store.close()
