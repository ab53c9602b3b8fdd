"""Group commit on PostgreSQL: one statement per batch, each write with its own guard and outcome."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from dramatiq.middleware import raise_thread_exception
from sqlalchemy import event, text

from reliable.errors import LeaseLost, LeaseLostInterrupt, StoreUnavailable
from reliable.states import Event, JobStatus
from reliable.store import Claim, NewJob, StateStore
from reliable.store.batching import GroupCommit, _Pending, batch_rows, batch_write_sql
from reliable.store.sqlrunner import load_queries
from reliable.store.writes import event_write, transition_write

from support import wait_for


def test_the_batch_statement_is_derived_from_the_single_one() -> None:
    sql = batch_write_sql(load_queries("postgresql")["write_job"])
    assert "jsonb_to_recordset(%(rows)s::jsonb)" in sql
    assert "FOR UPDATE" not in sql  # the UPDATE locks its rows: no lock record before it
    assert "jsonb_to_recordset(%(rules)s::jsonb)" in sql
    leftover = sql.replace("%(now)s", "").replace("%(rows)s", "").replace("%(rules)s", "").replace("%(ids)s", "")
    assert "%(" not in leftover


def test_a_changed_single_statement_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="update batch_write_sql"):
        batch_write_sql(load_queries("postgresql")["write_job"].replace("FROM j, e", "FROM e, j"))


@pytest.fixture
def pg(pg_store: StateStore) -> Iterator[StateStore]:
    store = StateStore(engine=pg_store.engine, group_commit=True)
    yield store


def _register(store: StateStore, *job_ids: str) -> None:
    store.register_many([NewJob(job_id, "q", "a", {}) for job_id in job_ids])


def test_a_batch_commits_each_write_with_its_own_guard(pg: StateStore) -> None:
    _register(pg, "a", "b", "c")
    claims = {j: pg.claim(j, worker_id="w", lease_ttl=60) for j in ("a", "b", "c")}
    writes = [transition_write(j, Event.SUCCEED, lease_id=claims[j].lease_id + (1 if j == "b" else 0),
                               worker_id="w") for j in ("a", "b", "c")]
    results = pg._sql.write_many(writes)
    assert [r is not None for r in results] == [True, False, True]
    assert [pg.get(j).status for j in ("a", "b", "c")] == [JobStatus.SUCCEEDED, JobStatus.RUNNING,
                                                          JobStatus.SUCCEEDED]
    job, event = results[0]  # type: ignore[misc]
    assert (job["job_id"], event["job_id"], event["event"]) == ("a", "a", Event.SUCCEED.value)
    attempts = pg.attempts("a")
    assert attempts[-1].outcome == Event.SUCCEED.value and attempts[-1].ended_at is not None


def test_batched_and_single_writes_leave_the_same_rows(pg_store: StateStore) -> None:
    """The same lifecycle (claim, retry, claim, checkpoint, succeed) written one by one and in batches."""
    single, batched = pg_store, StateStore(engine=pg_store.engine, group_commit=True)
    _register(single, "one")
    _register(batched, "two")
    for store, job_id in ((single, "one"), (batched, "two")):
        claim = store.claim(job_id, worker_id="w", lease_ttl=60, attempt_id=f"{job_id}-1")
        store.finish(job_id, claim.lease_id, Event.RETRY, worker_id="w", retry_delay=0.0)
        claim = store.claim(job_id, worker_id="w", lease_ttl=60, attempt_id=f"{job_id}-2")
        store.save_checkpoint(job_id, claim.lease_id, {"done": 3}, lease_ttl=60, worker_id="w")
        store.finish(job_id, claim.lease_id, Event.SUCCEED, worker_id="w")
    ignore = {"job_id", "attempt_id", "started_at", "finished_at", "lease_expires_at", "retry_at", "scheduled_at",
              "dispatched_at", "checkpoint_at", "created_at", "updated_at", "trace_id", "id", "at"}

    def shape(store: StateStore, job_id: str) -> tuple[Any, ...]:
        job = {k: v for k, v in vars(store.get(job_id)).items() if k not in ignore}
        events = [{k: v for k, v in vars(e).items() if k not in ignore} for e in store.events(job_id)]
        return job, events, [(a.attempt, a.outcome) for a in store.attempts(job_id)]

    assert shape(single, "one") == shape(batched, "two")
    assert batched._sql.group_commit is not None and batched._sql.group_commit.writes >= 5


def test_a_stale_row_in_a_batch_is_refused_and_the_others_commit(pg: StateStore) -> None:
    job_ids = ["first", "b1", "b2", "stale", "b3"]
    _register(pg, *job_ids)
    leases = {j: pg.claim(j, worker_id="w", lease_ttl=60).lease_id for j in job_ids}
    group = pg._sql.group_commit
    assert group is not None
    release = threading.Event()
    real_one = group._write_one

    def held(write: Any) -> Any:  # the first flush waits, so the next writes gather into one batch
        release.wait(10)
        return real_one(write)

    group._write_one = held  # type: ignore[method-assign]
    sizes: list[int] = []
    real_many = group._write_many

    def recorded(writes: Any) -> Any:
        sizes.append(len(writes))
        return real_many(writes)

    group._write_many = recorded  # type: ignore[method-assign]
    outcomes: dict[str, object] = {}

    def finish(job_id: str) -> None:
        lease = leases[job_id] + (7 if job_id == "stale" else 0)
        try:
            outcomes[job_id] = pg.finish(job_id, lease, Event.SUCCEED, worker_id="w").status
        except LeaseLost as exc:
            outcomes[job_id] = exc

    threads = [threading.Thread(target=finish, args=("first",))]
    start = group.batches
    threads[0].start()
    wait_for(lambda: group.batches == start + 1, "the first flush")
    batches_before = group.batches
    for job_id in job_ids[1:]:
        threads.append(threading.Thread(target=finish, args=(job_id,)))
        threads[-1].start()
    wait_for(lambda: len(group._queue) == 4, "four writes waiting behind the first")
    release.set()
    for thread in threads:
        thread.join(10)
    assert sizes[0] == 4, "the four waiting writes went as one statement"
    assert group.batches > batches_before
    assert isinstance(outcomes["stale"], LeaseLost)
    assert {j: outcomes[j] for j in ("first", "b1", "b2", "b3")} == dict.fromkeys(
        ("first", "b1", "b2", "b3"), JobStatus.SUCCEEDED)
    assert pg.get("stale").status is JobStatus.RUNNING
    assert "stale_commit_rejected" in [e.event for e in pg.events("stale")]


def test_a_batch_that_fails_is_written_row_by_row(pg: StateStore) -> None:
    _register(pg, "x", "y")
    leases = {j: pg.claim(j, worker_id="w", lease_ttl=60).lease_id for j in ("x", "y")}
    calls: list[int] = []

    def broken(writes: Any) -> Any:
        calls.append(len(writes))
        raise RuntimeError("one bad row")

    group = GroupCommit(broken, pg._sql._write_alone)
    batch = [_Pending(transition_write(j, Event.SUCCEED, lease_id=leases[j], worker_id="w")) for j in ("x", "y")]
    group._flush(batch)
    assert calls == [2], "tried as one statement first"
    assert all(p.error is None and p.result is not None for p in batch)
    assert [pg.get(j).status for j in ("x", "y")] == [JobStatus.SUCCEEDED] * 2


def test_a_lost_connection_fails_every_write_of_the_batch_for_its_caller_to_retry(pg: StateStore) -> None:
    def unavailable(writes: Any) -> Any:
        raise StoreUnavailable("connection lost")

    group = GroupCommit(unavailable, pg._sql._write_alone)
    batch = [_Pending(transition_write(j, Event.SUCCEED, lease_id=1, worker_id="w")) for j in ("x", "y")]
    group._flush(batch)
    assert all(isinstance(p.error, StoreUnavailable) and p.answered for p in batch)


def test_a_forked_child_starts_with_no_leader_and_an_empty_queue(pg: StateStore,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _register(pg, "parent", "child")
    group = pg._sql.group_commit
    assert group is not None
    pg.claim("parent", worker_id="w", lease_ttl=60)
    # As if the parent forked while another thread of it led a batch: the child has no such thread.
    stranded = _Pending(transition_write("parent", Event.SUCCEED, lease_id=1, worker_id="w"))
    group._leader, group._queue = stranded, [stranded]
    monkeypatch.setattr("reliable.store.batching.os.getpid", lambda: -12345)
    assert pg.claim("child", worker_id="w", lease_ttl=60).job.status is JobStatus.RUNNING
    assert group._pid == -12345 and group._leader is None and group._queue == []


def test_batch_rows_send_each_rule_once_and_leave_out_what_is_null_or_false() -> None:
    writes = [transition_write(j, Event.CLAIM, worker_id="w", attempt_id=f"{j}-1", lease_ttl=60.0) for j in "ab"]
    writes.append(transition_write("c", Event.SUCCEED, lease_id=0, worker_id="w"))
    rows, rules = batch_rows(writes)
    assert [r["rule"] for r in rows] == [0, 0, 1] and [r["rule_no"] for r in rules] == [0, 1]
    assert rows[0] == {"job_id": "a", "worker_id": "w", "attempt_id": "a-1", "lease_ttl": 60.0,
                       "event_worker_id": "w", "rule": 0}
    assert rows[2]["lease_id"] == 0  # a zero is a value, not a missing one
    assert rules[1]["event"] == Event.SUCCEED.value and rules[1]["release"] is True


def test_a_batch_of_mixed_writes_leaves_the_rows_single_writes_leave(pg_store: StateStore) -> None:
    """Claims, a failure with its error, a checkpoint, a success and an operator's note: one by one
    (`write`) and as two batches (`write_many`), on twin jobs."""
    sql = pg_store._sql
    _register(pg_store, "s1", "s2", "s3", "b1", "b2", "b3")
    error = {"error_class": "transient", "error_type": "OSError", "message": "reset", "traceback": "tb"}

    def first(p: str) -> list[Any]:
        return [transition_write(f"{p}{i}", Event.CLAIM, worker_id="w", attempt_id=f"{p}{i}-1", lease_ttl=60.0)
                for i in (1, 2, 3)]

    def second(p: str, lease: dict[str, int]) -> list[Any]:
        return [transition_write(f"{p}1", Event.RETRY, lease_id=lease[f"{p}1"], worker_id="w", delay=5.0, error=error),
                event_write(f"{p}2", "checkpoint", lease_id=lease[f"{p}2"], active_only=True, checkpoint='{"n": 1}',
                            lease_ttl=60.0, worker_id="w"),
                transition_write(f"{p}3", Event.SUCCEED, lease_id=lease[f"{p}3"], worker_id="w"),
                ]

    for p, run in (("s", lambda ws: [sql.write(w) for w in ws]), ("b", sql.write_many)):
        written = run(first(p))
        lease = {job["job_id"]: job["lease_id"] for job, _ in written}
        assert all(r is not None for r in run(second(p, lease)))
        assert run([event_write(f"{p}3", "note", operator="ops", reason="checked", host="h")])[0] is not None
    ignore = {"job_id", "attempt_id", "started_at", "finished_at", "lease_expires_at", "retry_at", "scheduled_at",
              "dispatched_at", "checkpoint_at", "created_at", "updated_at", "id", "at"}

    def shape(job_id: str) -> tuple[Any, ...]:
        job = {k: v for k, v in vars(pg_store.get(job_id)).items() if k not in ignore}
        events = [{k: v for k, v in vars(e).items() if k not in ignore} for e in pg_store.events(job_id)]
        return job, events, [(a.attempt, a.outcome, a.error_class) for a in pg_store.attempts(job_id)]

    for i in (1, 2, 3):
        assert shape(f"s{i}") == shape(f"b{i}")
    assert pg_store.get("b1").last_error_class == "transient" and pg_store.get("b2").checkpoint == {"n": 1}


def test_the_kept_connection_never_plans_a_scan_of_the_job_table(pg: StateStore) -> None:
    """Its generic plan of write_jobs is made once: made on a small table it would otherwise lock
    the batch's rows through a scan of every job, for as long as the connection lives."""
    _register(pg, "a", "b")
    writes = [transition_write(j, Event.CLAIM, worker_id="w", attempt_id=f"{j}-1", lease_ttl=60.0) for j in "ab"]
    rows, rules = batch_rows(writes)
    query = pg._sql._positional["write_jobs"]
    types = {"now": "float8", "rows": "jsonb", "rules": "jsonb", "ids": "text[]"}
    values = query.values({"rows": json.dumps(rows), "rules": json.dumps(rules), "now": None, "ids": ["a", "b"]})
    with pg._sql._kept_connection() as raw:
        cursor = psycopg.ClientCursor(raw.driver_connection)  # the values inlined: EXECUTE takes no $n
        sql = query.sql if isinstance(query.sql, str) else query.sql.decode("ascii")
        cursor.execute(f"PREPARE kept_write_jobs ({', '.join(types[n] for n in query.names)}) AS {sql}")
        placeholders = ", ".join(["%s"] * len(values))
        plan = "\n".join(row[0] for row in cursor.execute(f"EXPLAIN EXECUTE kept_write_jobs({placeholders})",
                                                          values).fetchall())
        cursor.execute("DEALLOCATE kept_write_jobs")
    assert "Seq Scan" not in plan and "reliable_jobs_pkey" in plan, plan


def _pooled_settings(store: StateStore, kept: int) -> list[tuple[str, str]]:
    """enable_seqscan and plan_cache_mode of every connection the pool can hand out now (`kept`:
    how many connections group commit holds)."""
    held = [store.engine.raw_connection() for _ in range(store.max_connections - kept)]
    try:
        return [tuple(raw.driver_connection.execute("SELECT current_setting('enable_seqscan'), "
                                                    "current_setting('plan_cache_mode')").fetchone())
                for raw in held]
    finally:
        for raw in held:
            raw.close()


def test_the_kept_sessions_settings_never_reach_a_pooled_connection(pg: StateStore) -> None:
    """The kept connection leaves the pool for good: an error in a batch invalidates it (the next
    batch opens another), so no other statement ever runs without sequential scans."""
    _register(pg, "a", "b")
    claims = [transition_write(j, Event.CLAIM, worker_id="w", attempt_id=f"{j}-1", lease_ttl=60.0) for j in "ab"]
    assert all(pg._sql.write_many(claims))
    assert set(_pooled_settings(pg, kept=1)) == {("on", "auto")}
    with pytest.raises(RuntimeError), pg._sql._kept_connection():
        raise RuntimeError("a batch interrupted")
    assert set(_pooled_settings(pg, kept=0)) == {("on", "auto")}
    assert all(pg._sql.write_many([event_write(j, "note", operator="op") for j in "ab"]))
    pg._sql.release_kept()
    assert set(_pooled_settings(pg, kept=0)) == {("on", "auto")}


def _waiting_on_locks(store: StateStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'")).scalar_one())


def test_two_batches_over_the_same_jobs_in_opposite_order_never_deadlock(pg_store: StateStore) -> None:
    """The batch takes no lock before its UPDATE: the UPDATE locks the rows in its plan's order of
    the primary key scan, whatever order the writes came in, so two processes' flushers writing the
    same jobs at once wait for each other and never form a cycle (a deadlock would fail a batch)."""
    first, second = (StateStore(engine=pg_store.engine, group_commit=True) for _ in range(2))
    for round_no in range(20):
        ids = [f"r{round_no}-{n:02d}" for n in range(16)]
        _register(pg_store, *ids)
        start = threading.Barrier(2)
        results: dict[str, list[Any]] = {}
        errors: list[BaseException] = []

        def claim_all(store: StateStore, order: list[str], name: str, start: threading.Barrier = start,
                      results: dict[str, list[Any]] = results, errors: list[BaseException] = errors) -> None:
            writes = [transition_write(j, Event.CLAIM, worker_id=name, attempt_id=f"{name}-{j}", lease_ttl=60.0)
                      for j in order]
            start.wait(timeout=30)
            try:
                results[name] = store._sql.write_many(writes)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=claim_all, args=(first, ids, "a")),
                   threading.Thread(target=claim_all, args=(second, ids[::-1], "b"))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        won = {r[0]["job_id"] for name in "ab" for r in results[name] if r is not None}
        assert won == set(ids)
        assert sum(r is not None for name in "ab" for r in results[name]) == len(ids), "each job claimed once"


def test_a_deadlocked_batch_is_written_row_by_row_with_each_writes_own_result(pg: StateStore) -> None:
    """A cycle with another writer (here a transaction holding y that then wants x while the batch
    holds x and waits for y): PostgreSQL fails the batch's statement, the flusher writes its rows
    one by one, and each write gets the result it would have had alone."""
    _register(pg, "x", "y")
    failures: list[BaseException] = []

    def recording(writes: Any) -> Any:
        try:
            return pg._sql.write_many(writes)
        except BaseException as exc:
            failures.append(exc)
            raise

    group = GroupCommit(recording, pg._sql._write_alone)
    batch = [_Pending(transition_write(j, Event.CLAIM, worker_id="w", attempt_id=f"{j}-1", lease_ttl=60.0))
             for j in ("x", "y")]
    other = pg.engine.raw_connection()
    try:
        cursor = other.driver_connection.cursor()
        cursor.execute("SET LOCAL deadlock_timeout = '60s'")  # the batch, waiting first, is the victim
        cursor.execute("SELECT job_id FROM reliable_jobs WHERE job_id = 'y' FOR UPDATE")
        flusher = threading.Thread(target=group._flush, args=(batch,))
        flusher.start()
        wait_for(lambda: _waiting_on_locks(pg) >= 1, "the batch waiting for y")
        cursor.execute("UPDATE reliable_jobs SET version = version WHERE job_id = 'x'")  # waits for the batch's x
        other.commit()
    finally:
        other.close()
    flusher.join(timeout=60)
    assert len(failures) == 1 and isinstance(failures[0].__cause__, psycopg.errors.DeadlockDetected), failures
    assert all(p.answered and p.error is None and p.result is not None for p in batch)
    assert [(pg.get(j).status, pg.get(j).attempt_id) for j in ("x", "y")] == [
        (JobStatus.RUNNING, "x-1"), (JobStatus.RUNNING, "y-1")]


def test_many_threads_claim_note_and_finish_through_one_group_commit(pg: StateStore) -> None:
    """12 threads, each claiming and finishing its own jobs and noting a job all of them share (so a
    job is often pending twice: its second write waits for the next batch): every write lands once."""
    threads_n, jobs_n = 12, 10
    _register(pg, "shared", *(f"t{t}-{j}" for t in range(threads_n) for j in range(jobs_n)))
    group = pg._sql.group_commit
    assert group is not None
    failures: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for j in range(jobs_n):
                job_id = f"t{t}-{j}"
                claim = pg.claim(job_id, worker_id=f"w{t}", lease_ttl=60, attempt_id=f"{job_id}-1")
                assert pg._sql.write(event_write("shared", "note", operator=f"w{t}", reason=str(j))) is not None
                pg.finish(job_id, claim.lease_id, Event.SUCCEED, worker_id=f"w{t}")
        except BaseException as exc:
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not failures and not any(t.is_alive() for t in threads)
    assert group.writes == 3 * threads_n * jobs_n and group._leader is None and group._queue == []
    for t in range(threads_n):
        for j in range(jobs_n):
            job_id = f"t{t}-{j}"
            assert pg.get(job_id).status is JobStatus.SUCCEEDED
            assert [e.event for e in pg.events(job_id)] == ["enqueued", "claim", "succeed"]
    assert sum(1 for e in pg.events("shared") if e.event == "note") == threads_n * jobs_n


def test_a_leader_interrupted_after_its_batch_committed_leaves_the_others_claims_whole(pg: StateStore) -> None:
    """A lost-lease interrupt lands in the leading thread after its statement committed (the reply
    is lost to it): it raises there alone; the next leader runs the other claims again, each is
    refused as already taken and its caller finds its own attempt, as after any lost reply."""
    _register(pg, "first", "a", "b", "c")
    group = pg._sql.group_commit
    assert group is not None
    release, entered, opened = threading.Event(), threading.Event(), threading.Event()
    held_thread: list[int] = []
    real_one, real_many = group._write_one, group._write_many

    def held_one(write: Any) -> Any:  # the first batch waits, so the next claims gather into one
        release.wait(10)
        return real_one(write)

    def interrupted_many(writes: Any) -> Any:
        results = real_many(writes)
        if not entered.is_set():
            held_thread.append(threading.get_ident())
            entered.set()
            while not opened.wait(0.01):  # Python between the waits: the interrupt lands here
                pass
        return results

    group._write_one, group._write_many = held_one, interrupted_many  # type: ignore[method-assign]
    outcomes: dict[str, Any] = {}
    idents: dict[str, int] = {}

    def claim(job_id: str) -> None:
        idents[job_id] = threading.get_ident()
        try:
            outcomes[job_id] = pg.claim(job_id, worker_id="w", lease_ttl=60, attempt_id=f"{job_id}-1")
        except BaseException as exc:
            outcomes[job_id] = exc

    threads = [threading.Thread(target=claim, args=("first",))]
    threads[0].start()
    wait_for(lambda: group.batches == 1, "the first batch")
    for job_id in ("a", "b", "c"):
        threads.append(threading.Thread(target=claim, args=(job_id,)))
        threads[-1].start()
    wait_for(lambda: len(group._queue) == 3, "three claims waiting behind the first")
    release.set()
    entered.wait(10)
    raise_thread_exception(held_thread[0], LeaseLostInterrupt)
    opened.set()
    for thread in threads:
        thread.join(30)
    assert not any(t.is_alive() for t in threads)
    leader = next(j for j, ident in idents.items() if ident == held_thread[0])
    assert isinstance(outcomes[leader], LeaseLostInterrupt)
    for job_id in {"a", "b", "c"} - {leader}:
        assert isinstance(outcomes[job_id], Claim) and outcomes[job_id].job.attempt_id == f"{job_id}-1"
    for job_id in ("a", "b", "c"):  # the leader's claim committed too: its thread just never heard
        job = pg.get(job_id)
        assert (job.status, job.attempt_id, job.attempt) == (JobStatus.RUNNING, f"{job_id}-1", 1)
        assert [e.event for e in pg.events(job_id)] == ["enqueued", "claim"]
    assert group._leader is None and group._queue == []


def test_a_batch_finds_jobs_whose_ids_need_quoting_in_an_array(pg: StateStore) -> None:
    """A batch's job ids go as one array literal (sqlrunner._array_literal): ids with quotes,
    backslashes, commas, braces, spaces or NULL-like text are each found as they are."""
    job_ids = ['a"b', "c\\d", "e,f", "{g}", "h i", "NULL", "ü-1"]
    _register(pg, *job_ids)
    writes = [transition_write(job_id, Event.CLAIM, worker_id="w", lease_ttl=60, attempt_id=f"at{n}")
              for n, job_id in enumerate(job_ids)]
    results = pg._sql.write_many(writes)
    assert [None if result is None else result[0]["job_id"] for result in results] == job_ids
    assert {pg.get(job_id).status for job_id in job_ids} == {JobStatus.RUNNING}


def test_a_lone_write_goes_on_the_batches_kept_connection_not_one_checked_out_per_write(pg: StateStore) -> None:
    """A batch of one (the common case at moderate load) runs on the connection the batches keep."""
    _register(pg, *(f"lone-{n}" for n in range(6)))
    pg.claim("lone-0", worker_id="w", lease_ttl=60)  # opens the kept connection (and checks the schema)
    checkouts: list[object] = []

    def checked_out(*_: object) -> None:
        checkouts.append(object())

    event.listen(pg.engine, "checkout", checked_out)
    try:
        for n in range(1, 6):
            pg.claim(f"lone-{n}", worker_id="w", lease_ttl=60)
    finally:
        event.remove(pg.engine, "checkout", checked_out)
    assert checkouts == []
    assert [pg.get(f"lone-{n}").status for n in range(6)] == [JobStatus.RUNNING] * 6


def test_a_lone_write_whose_kept_connection_the_server_ended_is_written_on_a_new_one(pg: StateStore) -> None:
    _register(pg, "cut-1", "cut-2")
    pg.claim("cut-1", worker_id="w", lease_ttl=60)  # opens the kept connection
    kept = pg._sql._kept
    assert kept is not None
    backend = kept[0].driver_connection.info.backend_pid
    with pg.engine.connect() as conn:
        conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
    wait_for(lambda: _gone(pg, backend), "the kept connection's backend to end")
    # Replaced before use (it hung up while idle), as the pool's checkout replaces one: no write fails.
    assert pg._sql.write(transition_write("cut-2", Event.CLAIM, worker_id="w", attempt_id="a", lease_ttl=60))
    assert pg._sql._kept is not None and pg._sql._kept[0] is not kept[0]


def _gone(store: StateStore, pid: int) -> bool:
    with store.engine.connect() as conn:
        alive = conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}).scalar_one()
    return alive == 0
