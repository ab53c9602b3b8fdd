"""What PostgreSQL spends per durable job in the group commit's batch statement, deterministically.

A durable job is one claim write and one outcome write, each a row of a `write_jobs` batch
(reliable/store/batching.py). This registers `--jobs` jobs in a scratch database, then claims and
succeeds them in batches of `--batch` through `SqlRunner.write_many` on one connection, and reports
per job: the WAL records, full-page images and bytes the statements wrote (EXPLAIN (ANALYZE, WAL)
of each batch: this statement's own WAL, whatever else runs on the server), the index entries added
(pg_stat_user_indexes is per table; counted from the tables' indexes), and the backend's CPU time
(/proc/<pid>/schedstat of the connection's server process, nanoseconds) over the batches.

    .venv/bin/python bench/pg_write_cost.py --jobs 3200 --batch 32
"""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import create_engine, text

from reliable.states import Event
from reliable.store import StateStore
from reliable.store.batching import batch_rows
from reliable.store.records import NewJob
from reliable.store.writes import JobWrite, transition_write

ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _cpu_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _breakdown(conn: Any, sql: str | bytes, values: list[Any]) -> list[tuple[Any, ...]]:
    """The WAL records of one batch by kind: its own transaction's (by xid), via pg_walinspect."""
    conn.execute("BEGIN")
    start = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    conn.execute(sql, values).fetchall()
    xid = conn.execute("SELECT pg_current_xact_id()::text::int8").fetchone()[0]
    conn.execute("COMMIT")
    end = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]  # walinspect reads flushed WAL only
    return conn.execute(
        "SELECT resource_manager, record_type, count(*), sum(record_length), sum(fpi_length) "
        "FROM pg_get_wal_records_info($1, $2) WHERE xid::text::int8 = $3 "
        "GROUP BY 1, 2 ORDER BY 3 DESC", (start, end, xid)).fetchall()


def _run(store: StateStore, writes: list[JobWrite], *, explain: bool, look: bool = False) -> dict[str, float]:
    runner = store._sql
    query = runner._positional["write_jobs"]
    statuses = runner._positional["job_statuses"]
    totals = {"records": 0.0, "fpi": 0.0, "bytes": 0.0, "cpu_ms": 0.0, "hit": 0.0, "dirtied": 0.0}
    with runner._kept_connection() as raw:
        import psycopg

        conn = psycopg.RawCursor(raw.driver_connection)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        start = _cpu_ns(pid)
        for i in range(0, len(writes), _run.batch):  # type: ignore[attr-defined]
            chunk = writes[i:i + _run.batch]  # type: ignore[attr-defined]
            rows, rules = batch_rows(chunk)
            values = query.values({"rows": json.dumps(rows), "rules": json.dumps(rules), "now": None,
                                   "ids": sorted(w.job_id for w in chunk)})
            if look:  # the fast path's batched look before its runs (the worker's pooled connection prepares it too)
                conn.execute(statuses.sql, statuses.values({"job_ids": [w.job_id for w in chunk]}),
                             prepare=True).fetchall()
            if explain and i == len(writes) // 2 // _run.batch * _run.batch:  # type: ignore[attr-defined]
                print(f"WAL of one batch of {len(chunk)} ({chunk[0].event}):")
                for kind in _breakdown(conn, query.sql, values):
                    print("   ", *kind)
            elif explain:
                plan: Any = conn.execute(b"EXPLAIN (ANALYZE, WAL, BUFFERS, FORMAT JSON) " + query.sql,
                                         values).fetchone()[0][0]["Plan"]
                totals["records"] += plan.get("WAL Records", 0)
                totals["fpi"] += plan.get("WAL FPI", 0)
                totals["bytes"] += plan.get("WAL Bytes", 0)
                totals["hit"] += plan.get("Shared Hit Blocks", 0)
                totals["dirtied"] += plan.get("Shared Dirtied Blocks", 0)
            else:
                conn.execute(query.sql, values, prepare=True).fetchall()
        totals["cpu_ms"] = (_cpu_ns(pid) - start) / 1e6
    return totals


def _steady(store: StateStore, ids: list[str], batch: int) -> None:
    """Register batch k, claim batch k-1, succeed batch k-2, in turn; the claims and outcomes on one
    kept connection, whose backend CPU and pg_stat_user_tables' HOT and same-page counts are reported."""
    runner = store._sql
    query = runner._positional["write_jobs"]
    chunks = [ids[i:i + batch] for i in range(0, len(ids), batch)]
    leases: dict[str, int] = {}
    cpu = 0
    with runner._kept_connection() as raw:
        import psycopg

        conn = psycopg.RawCursor(raw.driver_connection)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        print(f"kept connection's backend: pid {pid}", file=sys.stderr, flush=True)
        before = conn.execute("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                              "WHERE relname = 'reliable_jobs'").fetchone()
        start = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
        for k in range(len(chunks) + 2):
            if k < len(chunks):
                store.register_many([NewJob(job_id=j, queue="q", actor="a", message={"args": []}) for j in chunks[k]])
            steps = []
            if 0 <= k - 1 < len(chunks):
                steps.append([transition_write(j, Event.CLAIM, worker_id="w", lease_ttl=60.0,
                                               attempt_id=uuid.uuid4().hex) for j in chunks[k - 1]])
            if 0 <= k - 2 < len(chunks):
                steps.append([transition_write(j, Event.SUCCEED, lease_id=leases[j], worker_id="w")
                              for j in chunks[k - 2]])
            for writes in steps:
                rows, rules = batch_rows(writes)
                values = query.values({"rows": json.dumps(rows), "rules": json.dumps(rules), "now": None,
                                       "ids": sorted(w.job_id for w in writes)})
                t0 = _cpu_ns(pid)
                result = conn.execute(query.sql, values, prepare=True).fetchall()  # autocommit
                cpu += _cpu_ns(pid) - t0
                for row in result:
                    leases[row[0]] = row[7]
        end = conn.execute("SELECT pg_current_wal_flush_lsn()").fetchone()[0]
        wal = conn.execute("SELECT count(*), sum(record_length) FILTER (WHERE record_type = 'LOCK'), "
                           "count(*) FILTER (WHERE record_type = 'LOCK') "
                           "FROM pg_get_wal_records_info($1, $2) WHERE xid::text::int8 > 0",
                           (start, end)).fetchone()
        import time
        time.sleep(0.7)  # the statistics collector's flush
        after = conn.execute("SELECT pg_stat_force_next_flush()").fetchone() and conn.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'reliable_jobs'").fetchone()
    n = len(ids)
    print(f"steady, jobs {n}, batch {batch}: per durable job backend cpu {cpu / n / 1000:.1f} us "
          f"(claim + outcome statements), WAL records (all, incl. registration) {wal[0] / n:.2f}, "
          f"heap LOCK {wal[2] / n:.2f}; updates {after[0] - before[0]}, HOT {after[1] - before[1]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3200)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--explain", action="store_true", help="WAL and buffers per statement (EXPLAIN ANALYZE)")
    parser.add_argument("--fillfactor", type=int, help="set reliable_jobs' fillfactor before registering")
    parser.add_argument("--sql", action="append", default=[], help="run after the upgrade (e.g. try an index)")
    parser.add_argument("--fast", action="store_true",
                        help="the fast path instead: a look (job_statuses) and a fast_succeed per job, no claim")
    parser.add_argument("--steady", action="store_true",
                        help="interleaved as in a steady stream: register a batch, claim the previous one, "
                             "succeed the one before (not all registrations first: updates then find no room "
                             "on their page)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    _run.batch = args.batch  # type: ignore[attr-defined]
    name = f"reliable_pgcost_{uuid.uuid4().hex[:8]}"
    admin = create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    store = StateStore(ADMIN.rsplit("/", 1)[0] + f"/{name}", group_commit=True)
    try:
        store.upgrade()
        with store.engine.begin() as c:
            c.execute(text("CREATE EXTENSION IF NOT EXISTS pg_walinspect"))
            for statement in args.sql:
                c.execute(text(statement))
            if args.fillfactor:
                c.execute(text(f"ALTER TABLE reliable_jobs SET (fillfactor = {args.fillfactor})"))
        ids = [f"job-{uuid.uuid4().hex}" for _ in range(args.jobs)]
        if args.steady:
            _steady(store, ids, args.batch)
            return
        for i in range(0, len(ids), 500):
            store.register_many([NewJob(job_id=j, queue="q", actor="a", message={"args": []})
                                 for j in ids[i:i + 500]])
        with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.execute(text("VACUUM ANALYZE"))
        attempts = {j: uuid.uuid4().hex for j in ids}
        if args.fast:
            fast = [transition_write(j, Event.FAST_SUCCEED, worker_id="w", attempt_id=attempts[j]) for j in ids]
            done_fast = _run(store, fast, explain=args.explain, look=True)
            with store.engine.connect() as c:
                done = c.execute(text("SELECT count(*) FROM reliable_jobs WHERE status = 'SUCCEEDED'")).scalar_one()
            assert done == args.jobs, done
            print(f"per fast-path job (look + commit): backend cpu {done_fast['cpu_ms'] / args.jobs * 1000:.1f} us"
                  + (f", WAL {done_fast['records'] / args.jobs:.2f} records, {done_fast['bytes'] / args.jobs:.0f} B, "
                     f"buffers hit {done_fast['hit'] / args.jobs:.1f}" if args.explain else ""))
            return
        claims = [transition_write(j, Event.CLAIM, worker_id="w", lease_ttl=60.0, attempt_id=attempts[j])
                  for j in ids]
        claimed = _run(store, claims, explain=args.explain)
        with store.engine.connect() as c:
            leases = dict(c.execute(text("SELECT job_id, lease_id FROM reliable_jobs")).all())
        outcomes = [transition_write(j, Event.SUCCEED, lease_id=leases[j], worker_id="w") for j in ids]
        succeeded = _run(store, outcomes, explain=args.explain)
        with store.engine.connect() as c:
            done = c.execute(text("SELECT count(*) FROM reliable_jobs WHERE status = 'SUCCEEDED'")).scalar_one()
            indexes = c.execute(text(
                "SELECT c.relname, count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid "
                "WHERE c.relname IN ('reliable_jobs', 'reliable_job_events') GROUP BY c.relname")).all()
        assert done == args.jobs, done
        n = args.jobs
        print(f"jobs {n}, batch {args.batch}, indexes {dict(indexes)}")
        for label, t in (("claim", claimed), ("outcome", succeeded)):
            print(f"{label:8} per write: cpu {t['cpu_ms'] / n * 1000:.1f} us"
                  + (f", WAL {t['records'] / n:.2f} records {t['bytes'] / n:.0f} B fpi {t['fpi'] / n:.2f}, "
                     f"buffers hit {t['hit'] / n:.1f} dirtied {t['dirtied'] / n:.2f}" if args.explain else ""))
        total = {k: claimed[k] + succeeded[k] for k in claimed}
        print(f"per durable job: backend cpu {total['cpu_ms'] / n * 1000:.1f} us"
              + (f", WAL {total['records'] / n:.2f} records, {total['bytes'] / n:.0f} B, fpi {total['fpi'] / n:.2f}"
                 if args.explain else ""))
    finally:
        store.close()
        if not args.keep:
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


if __name__ == "__main__":
    main()
