"""The cost of limits per job on the store: job lifecycles/s with and without a slot and a token.

    .venv/bin/python bench/limits.py [--jobs 1500] [--threads 8] [--rounds 5]

What a worker thread does per job, from N threads of one process on PostgreSQL (group commit on,
as workers run): `plain` = claim + success; `concurrency` = take a slot + claim + success (the
slot frees itself when the attempt ends; limit 64: never refused, so this is the pure overhead);
`rate` = take a token + claim + success (a rate that is never reached), with 8 token buckets
and with 1 (one hot row: every start of the fleet locks it). Runs alternate; medians of
`--rounds`. Prints lifecycles/s, the ratio to `plain`, and how often a token request found every
bucket holding a token locked by another thread (SKIP LOCKED: in a worker that is a deferral;
here the bench asks again).
"""

from __future__ import annotations

import argparse
import os
import statistics
import uuid

from sqlalchemy import create_engine, text
from store_transactions import timed

from reliable import Event, StateStore
from reliable.limits import Limits, limit_spec
from reliable.limits.storage import LimitStore
from reliable.store import NewJob

REFUSED: dict[str, int] = {}  # token requests that found every bucket with a token locked
PG_ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")


def run(store: StateStore, variant: str, n: int, threads: int) -> float:
    ids = [uuid.uuid4().hex for _ in range(n)]
    store.register_many([NewJob(i, "bench", "noop", {}) for i in ids])
    limits = LimitStore(store)
    spec = {"concurrency": limit_spec("bench_c", Limits(concurrency=64)),
            "rate8": limit_spec("bench_r8", Limits(rate="1000000/s", shards=8)),
            "rate1": limit_spec("bench_r1", Limits(rate="1000000/s", shards=1))}.get(variant)

    refused = [0]

    def lifecycle(job_id: str) -> None:
        slot = None
        if spec is not None and spec.concurrency is not None:
            slot = limits.acquire(spec, "", job_id, ttl=60).slot
            assert slot is not None
        elif spec is not None:
            while not limits.take_token(spec, "").taken:  # every bucket with a token was locked: try again
                refused[0] += 1
        lease = store.claim(job_id, worker_id="bench", lease_ttl=60).lease_id
        store.finish(job_id, lease, Event.SUCCEED)  # the slot frees itself: its attempt ended

    rate = timed(threads, ids, lifecycle)
    REFUSED[variant] = REFUSED.get(variant, 0) + refused[0]
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1500)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    name = f"reliable_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = PG_ADMIN.rsplit("/", 1)[0] + "/" + name
    variants = ("plain", "concurrency", "rate8", "rate1")
    results: dict[str, list[float]] = {v: [] for v in variants}
    try:
        StateStore(url).upgrade()
        store = StateStore(url, max_connections=args.threads + 2, group_commit=True)
        for variant in variants:  # warm up: rows created, statements prepared
            run(store, variant, 100, args.threads)
        for _ in range(args.rounds):
            for variant in variants:
                results[variant].append(run(store, variant, args.jobs, args.threads))
        store.close()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()
    plain = statistics.median(results["plain"])
    print(f"{'variant':>12} {'lifecycles/s':>12} {'vs plain':>8} {'lock refusals/job':>17}   (PostgreSQL, "
          f"{args.threads} threads, median of {args.rounds})")
    total = args.jobs * args.rounds + 100
    for variant in variants:
        median = statistics.median(results[variant])
        print(f"{variant:>12} {median:12.0f} {median / plain:8.2f} {REFUSED.get(variant, 0) / total:17.3f}")


if __name__ == "__main__":
    main()
