"""A producer's sends share commits (PostgreSQL): the registrations of a process's threads that wait
together go as ONE statement (`register_jobs`: the rows and their `enqueued` events), one commit.

Batches are made deterministic by blocking the job table (LOCK TABLE ... SHARE: every insert
waits): the first send leads a batch stuck behind the lock, the next ones queue behind it, and the
lock's release lets them through as the second batch.
"""

from __future__ import annotations

import os
import resource
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from sqlalchemy import event, text

from reliable.deadlines import within
from reliable.errors import JobIdConflict, StoreUnavailable
from reliable.store import NewJob, StateStore, sqlrunner
from reliable.store.db import DEADLINE_WATCH
from reliable.store.engine import connect_engine
from reliable.store.registration import Registrations
from reliable.store.sqlrunner import Registering

from support import wait_for, waiting_on_a_lock


@pytest.fixture
def grouped(pg_store: StateStore) -> Iterator[StateStore]:
    """A PostgreSQL store (emptied) whose sends go through the group commit."""
    store = StateStore(pg_store.engine.url.render_as_string(hide_password=False), group_commit=True)
    yield store
    store.close()


def _job(job_id: str, *args: Any) -> NewJob:
    return NewJob(job_id=job_id, queue="default", actor="act",
                  message={"queue_name": "default", "actor_name": "act", "args": list(args), "kwargs": {},
                           "options": {}, "message_id": job_id, "message_timestamp": 0})


class Sends:
    """Sends in threads; each one's result or error by job id."""

    def __init__(self) -> None:
        self.outcomes: dict[str, Any] = {}
        self.threads: list[threading.Thread] = []

    def start(self, call: Callable[[], Any], job_id: str) -> None:
        def run() -> None:
            try:
                self.outcomes[job_id] = call()
            except Exception as exc:
                self.outcomes[job_id] = exc

        thread = threading.Thread(target=run)
        thread.start()
        self.threads.append(thread)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(30)


def _queued(store: StateStore) -> int:
    group = store._sql.registrations
    assert group is not None
    return len(group._queue)


def _blocked(store: StateStore) -> Iterator[Any]:
    """The job table locked against inserts until the block ends."""
    with store.engine.connect() as conn:
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        conn.execute(text("LOCK TABLE reliable_jobs IN SHARE MODE"))
        yield conn
        conn.rollback()


def _stuck_lead(store: StateStore, sends: Sends) -> Iterator[Any]:
    """A first send ("lead", registered) leading a batch stuck behind the locked table, until resumed
    (`next(..., None)`): the sends made meanwhile queue behind it."""
    lock = _blocked(store)
    next(lock)
    sends.start(lambda: store.register(_job("lead", 0)), "lead")
    wait_for(lambda: waiting_on_a_lock(store.engine), "the first batch to wait for the table")
    yield
    next(lock, None)


def test_sends_waiting_together_share_one_statement_and_commit(grouped: StateStore) -> None:
    sends = Sends()
    lock = _stuck_lead(grouped, sends)
    next(lock)
    for n in range(5):
        sends.start(lambda n=n: grouped.register(_job(f"job-{n}", n)), f"job-{n}")
    wait_for(lambda: _queued(grouped) == 5, "five sends queued behind it")
    next(lock, None)
    sends.join()
    assert sends.outcomes == {"lead": True, **{f"job-{n}": True for n in range(5)}}
    group = grouped._sql.registrations
    assert group is not None and (group.batches, group.writes) == (2, 6)
    for job_id in sends.outcomes:
        job = grouped.get(job_id)
        assert job.status.value == "PENDING" and [e.event for e in grouped.events(job_id)] == ["enqueued"]


def test_a_conflicting_resend_fails_alone_in_its_batch_and_an_identical_one_is_deduplicated(
        grouped: StateStore) -> None:
    assert grouped.register(_job("taken", 1))
    sends = Sends()
    lock = _stuck_lead(grouped, sends)
    next(lock)
    sends.start(lambda: grouped.register(_job("taken", 2)), "taken")  # other arguments: another job
    sends.start(lambda: grouped.register(_job("fresh", 3)), "fresh")
    wait_for(lambda: _queued(grouped) == 2, "two sends queued behind it")
    next(lock, None)
    sends.join()
    assert isinstance(sends.outcomes["taken"], JobIdConflict)
    assert sends.outcomes["lead"] is True and sends.outcomes["fresh"] is True
    assert grouped.get("taken").message["args"] == [1]
    assert grouped.register(_job("taken", 1)) is False  # the same message again: de-duplicated


def test_a_registrations_enqueued_event_is_the_row_the_database_wrote(grouped: StateStore) -> None:
    """`register_jobs` returns only the event's id and time; the rest is filled in from the row sent
    (sqlrunner._enqueued_event): it must equal the event row as stored, column for column."""
    jobs = [_job("ev-plain", 1),
            NewJob(job_id="ev-full", queue="other", actor="act2", message={"args": [2]}, owner="me",
                   workflow_id="wf-1", trace_id="tr-1", parent_job_id="ev-plain", checkpoint_schema=3, delay=5.0)]
    rows = [Registrations._new_job_row(job) for job in jobs]
    done = grouped._sql.register(rows, [None, '{"delay":5.0}'])
    done += grouped._sql.register_together([Registering("ev-lone", Registrations._new_job_row(_job("ev-lone", 3)),
                                                        None)])
    with grouped.engine.connect() as conn:
        stored = {row.job_id: dict(row._mapping) for row in conn.execute(text(
            "SELECT * FROM reliable_job_events WHERE job_id IN ('ev-plain', 'ev-full', 'ev-lone')"))}
    assert len(done) == 3 and all(each.event is not None for each in done)
    for each in done:
        assert each.event is not None
        assert list(each.event.items()) == list(stored[each.event["job_id"]].items())
    again = grouped._sql.register(rows[:1], [None])  # existed: no event, its actor and digest
    assert again[0].event is None and (again[0].actor, again[0].digest) == ("act", rows[0]["delivery_digest"])


def test_a_send_that_waits_past_its_timeout_leaves_the_queue_and_writes_nothing(grouped: StateStore) -> None:
    sends = Sends()
    lock = _stuck_lead(grouped, sends)
    next(lock)
    with pytest.raises(StoreUnavailable, match="nothing was written"):
        grouped.register(_job("late", 1), timeout=0.05)
    assert _queued(grouped) == 0
    next(lock, None)
    sends.join()
    assert sends.outcomes["lead"] is True
    assert grouped.find("late") is None


def test_an_asynchronous_registration_commits_without_the_flush_and_leaves_no_session_setting(
        grouped: StateStore) -> None:
    runner = grouped._sql
    row = Registrations._new_job_row(_job("quick", 1))
    fast, = runner.register_together([Registering("quick", row, None, synchronous=False)])
    assert fast.event is not None and fast.commit_mode == "off"
    row = Registrations._new_job_row(_job("durable", 1))
    mixed = runner.register_together([Registering("durable", row, None, synchronous=True),
                                      Registering("other", Registrations._new_job_row(_job("other", 2)), None,
                                                  synchronous=False)])
    assert [each.commit_mode for each in mixed] == ["on", "on"]  # one send that waits: the batch waits
    with runner._sending_lock:  # the connection the batches ran on: its session as it was
        raw, _cursor = runner._sending_connection()
        assert raw.driver_connection.execute("SHOW synchronous_commit").fetchone()[0] == "on"
    assert grouped.register(_job("flag", 1), synchronous=False) is True
    assert [e.event for e in grouped.events("flag")] == ["enqueued"]


def test_the_batches_connection_outlives_the_deadline_of_the_send_that_opened_it(grouped: StateStore) -> None:
    """The kept connection is not armed with its first caller's deadline (reliable.deadlines): a
    later batch on it is not cut when that deadline passes."""
    with within(0.3) as until:
        assert grouped.register(_job("first", 1))
    wait_for(lambda: time.monotonic() > until + 0.2, "the first send's deadline to pass")
    assert grouped.register(_job("second", 2))


def test_a_lone_senders_batches_run_on_one_connection_checked_out_once(grouped: StateStore) -> None:
    """The sends' batches keep their connection: no checkout from the pool (and check-in) per send."""
    assert grouped.register(_job("first", 0))  # opens it (and checks the schema, once)
    checkouts: list[object] = []
    event.listen(grouped.engine, "checkout", lambda *_: checkouts.append(object()))
    for n in range(5):
        assert grouped.register(_job(f"one-{n}", n))
    assert checkouts == []
    assert [grouped.get(f"one-{n}").status.value for n in range(5)] == ["PENDING"] * 5


def test_a_batch_stuck_past_its_sends_deadline_is_cut_and_the_next_send_gets_a_new_connection(
        grouped: StateStore) -> None:
    """The kept connection is armed with the leading send's deadline while its batch runs: a batch
    stuck (here behind a locked table) is cut there, and the next send replaces the connection
    instead of failing on it."""
    assert grouped.register(_job("warm", 0))  # the kept connection is open
    lock = _blocked(grouped)
    next(lock)
    began = time.monotonic()
    try:
        with within(0.5), pytest.raises(StoreUnavailable):
            grouped.register(_job("stuck", 1))
        assert time.monotonic() - began < 5
    finally:
        next(lock, None)
    assert grouped.register(_job("after", 2))
    assert grouped.get("after").status.value == "PENDING"


def test_a_kept_connection_the_server_closed_is_replaced_before_the_next_batch(grouped: StateStore) -> None:
    """As the pool replaces a connection that hung up (a restart) at checkout, the sends' kept one is
    replaced before its next batch: the send does not fail, nor wait for a retry."""
    assert grouped.register(_job("before", 0))
    runner = grouped._sql
    with runner._sending_lock:
        raw, _cursor = runner._sending_connection()
        pid = raw.driver_connection.info.backend_pid
    with grouped.engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    wait_for(lambda: _hung_up(raw), "the server to close the kept connection")
    began = time.monotonic()
    assert grouped.register(_job("after", 1))
    assert time.monotonic() - began < 0.2  # no retry's wait (0.25 s first)


def _hung_up(raw: Any) -> bool:
    from reliable.store.db import hung_up

    return hung_up(raw.driver_connection)


@pytest.fixture
def many_fds() -> Iterator[None]:
    """1,100 descriptors open (a busy web server's): the store's connections get numbers >= 1024,
    which select() refuses (FD_SETSIZE)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 1400
    if soft != resource.RLIM_INFINITY and soft < wanted:
        if hard != resource.RLIM_INFINITY and hard < wanted:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {wanted}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    fillers = [os.open("/dev/null", os.O_RDONLY) for _ in range(1100)]
    try:
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_kept_connection_is_kept_in_a_process_with_many_open_descriptors(
        many_fds: None, grouped: StateStore) -> None:
    """`db.hung_up` polls a descriptor of any number: a healthy kept connection numbered past 1024
    is not taken for one the server closed, and replaced before every batch."""
    assert grouped.register(_job("first", 0))
    runner = grouped._sql
    with runner._sending_lock:
        raw, _cursor = runner._sending_connection()
    assert raw.driver_connection.fileno() >= 1024
    connects: list[object] = []
    event.listen(grouped.engine, "connect", lambda *_: connects.append(object()))
    for n in range(5):
        assert grouped.register(_job(f"one-{n}", n))
    assert connects == [], f"{len(connects)} new connections for 5 sends"
    assert not _hung_up(raw)


def test_pooled_reads_work_in_a_process_with_many_open_descriptors(many_fds: None, grouped: StateStore) -> None:
    """The pool's checkout runs the same poll: a connection numbered past 1024 is handed out, not
    refused as hung up (every checkout failing with InvalidRequestError)."""
    assert grouped.register(_job("a", 0))
    for _ in range(3):
        assert grouped.get("a").status.value == "PENDING"


class _Interrupt(BaseException):
    """An asynchronous exception (a lost lease's interrupt) landing in a send's thread."""


def test_an_interrupt_as_a_batch_is_armed_leaves_the_kept_connection_disarmed(
        grouped: StateStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Arming the sends' kept connection with the batch's deadline and disarming it are in one
    try: an interrupt landing just after the arming never leaves it armed (it would cut a later
    batch at that old deadline)."""
    assert grouped.register(_job("warm", 0))
    runner = grouped._sql
    with runner._sending_lock:
        raw, _cursor = runner._sending_connection()
    watchdog = raw.info[DEADLINE_WATCH][0]
    arm = sqlrunner.arm_connection

    def armed_then_interrupted(*args: Any) -> None:
        arm(*args)
        raise _Interrupt

    monkeypatch.setattr(sqlrunner, "arm_connection", armed_then_interrupted)
    with within(0.5), pytest.raises(_Interrupt):
        grouped.register(_job("cut", 1))
    assert watchdog.armed() == 0
    monkeypatch.undo()
    assert grouped.register(_job("after", 2))


def test_a_child_forked_while_a_batch_holds_the_kept_connections_closes_its_store(grouped: StateStore) -> None:
    """A fork copies the kept connections' locks as held by the parent's batches: the child has
    its own (`os.register_at_fork`), and its close (`release_kept` first) returns instead of
    waiting for ever, leaving the parent's connections alone."""
    assert grouped.register(_job("warm", 0))
    runner = grouped._sql
    with runner._sending_lock, runner._kept_lock:  # batches in flight in the parent's other threads
        pid = os.fork()
        if pid == 0:
            signal.alarm(10)  # a hang ends the child with SIGALRM
            runner.release_kept()  # StoreCore.close() does this first
            os._exit(0)
        _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"the child hung (status {status})"
    with runner._sending_lock:
        raw, _cursor = runner._sending_connection()
    assert not _hung_up(raw)  # the parent's kept connection, untouched by the child
    assert grouped.register(_job("after", 1))


def _store_on_a_pool_of(url: str, size: int) -> StateStore:
    return StateStore(engine=connect_engine(url, max_connections=size), group_commit=True)


@pytest.mark.parametrize(("size", "kept"), [(2, 0), (3, 0), (4, 1)])
def test_the_sends_keep_a_connection_only_where_the_given_engines_pool_leaves_two(
        pg_store: StateStore, size: int, kept: int) -> None:
    """The pool's own size decides (a given engine's, not `max_connections`): with the worker's
    batches' connection and the sends', two must be left for the heartbeat and recovery."""
    store = _store_on_a_pool_of(pg_store.engine.url.render_as_string(hide_password=False), size)
    try:
        assert store.register(_job("sent", 0))
        assert store.engine.pool.checkedout() == kept  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_child_forked_without_python_s_fork_hooks_opens_its_own_sending_connection(grouped: StateStore) -> None:
    """A fork in C (uWSGI without py-call-osafterfork, an extension calling fork()) runs no
    os.register_at_fork hook: the child must still not send on the parent's kept connection."""
    import ctypes

    assert grouped.register(_job("warm", 0))
    runner = grouped._sql
    parents = runner._sending[0]
    reader, writer = os.pipe()
    pid = ctypes.CDLL(None).fork()
    if pid == 0:  # the child: answers through the pipe, never returns into pytest
        signal.alarm(10)
        try:
            with runner._sending_lock:
                raw, _ = runner._sending_connection()
            os.write(writer, b"shared" if raw is parents else b"own")
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    assert os.read(reader, 16) == b"own"
