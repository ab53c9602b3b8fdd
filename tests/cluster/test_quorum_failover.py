"""Quorum queues on a real three-node RabbitMQ cluster: the node holding the queue's leader is
killed mid-run; no job is lost, every job ends terminal, and a job ran twice only where the store
recorded the fencing that caught it. The recovery figures are printed (docs/rabbitmq.md)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence

import dramatiq
import pytest

from reliable.middleware import ReliableMiddleware
from reliable.states import JobStatus

from cluster_ledger import FENCING_EVENTS, Ledger, producer
from rabbit_nodes import RabbitNode
from support import wait_for
from workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _queue_facts(node: RabbitNode, queue: str) -> tuple[str, str]:
    """(type, leader node) of `queue`, as the cluster reports them."""
    for line in node.ctl("list_queues", "name", "type", "leader", "--quiet", "--no-table-headers").splitlines():
        fields = line.split()
        if fields and fields[0] == queue:
            return fields[1], fields[2]
    raise AssertionError(f"queue {queue} not listed by {node.name}")


def _recovery(times: Sequence[float], killed_at: float, *, window: float = 0.5) -> tuple[float, float, float]:
    """(jobs/s in the 3 s before the kill, the longest pause between two executions after it,
    seconds from the kill to the end of the first `window` after it running at half that rate)."""
    rate = sum(1 for t in times if killed_at - 3 <= t < killed_at) / 3
    after = [t for t in times if t >= killed_at]
    pause = max((b - a for a, b in zip([killed_at, *after], after, strict=False)), default=0.0)
    start = killed_at
    while start < (after[-1] if after else killed_at):
        if sum(1 for t in after if start <= t < start + window) >= rate * window / 2:
            return rate, pause, start + window - killed_at
        start += 0.1
    return rate, pause, float("inf")


def test_no_job_is_lost_when_the_leader_node_of_a_quorum_queue_is_killed(
        cluster: Sequence[RabbitNode], start_app: Callable[..., WorkerProcess], ledger_store: str,
        cluster_queue: str, request: pytest.FixtureRequest) -> None:
    total = 20_000 if request.config.getoption("--soak", default=False) else 2_000
    urls = [node.url for node in cluster]
    ledger = Ledger(ledger_store)
    try:
        with producer(urls, ledger_store) as broker:
            middleware = next(m for m in broker.middleware if isinstance(m, ReliableMiddleware))
            messages = [dramatiq.Message(queue_name=cluster_queue, actor_name="record", args=(), kwargs={},
                                         options={}) for _ in range(total)]
            assert middleware.enqueue_many(broker, messages) == total
        kind, leader = _queue_facts(cluster[0], cluster_queue)
        assert kind == "quorum"
        victim = next(node for node in cluster if node.name == leader)
        others = [node.url for node in cluster if node is not victim]
        # pika connects to the first node of its list that answers: one worker on the leader's node
        # (its connections die with it), one on another node.
        workers = [start_app([victim.url, *others], threads=8), start_app([*others, victim.url], threads=8)]

        def output() -> str:
            return "\n".join(worker.output()[-3000:] for worker in workers)

        wait_for(lambda: ledger.scalar("SELECT count(*) FROM ledger") >= total * 0.3, "a third of the jobs to run",
                 timeout=60, context=output)
        killed_at = time.time()
        victim.kill()
        survivor = next(node for node in cluster if node is not victim)
        wait_for(lambda: ledger.unfinished() == 0, "every job to be terminal", timeout=120, context=output)
        done_at = time.time()

        statuses = dict(ledger.rows("SELECT status, count(*) FROM reliable_jobs GROUP BY status"))
        assert statuses == {JobStatus.SUCCEEDED.value: total}
        runs = ledger.runs()
        assert len(runs) == total  # 0 jobs lost: every job's effect is in the ledger
        duplicates = {job: count for job, count in runs.items() if count > 1}
        for job in duplicates:
            fenced = [event for event in ledger.events(job) if event in FENCING_EVENTS]
            assert fenced, f"job {job} ran {runs[job]} times with no fencing event: {ledger.events(job)}"
        times = [row[0] for row in ledger.rows("SELECT at FROM ledger ORDER BY at")]
        rate, pause, resumed = _recovery(times, killed_at)
        ran_before = sum(1 for t in times if t < killed_at)
        by_worker = ledger.rows("SELECT pid, array_agg(at ORDER BY at) FROM ledger WHERE at >= :k GROUP BY pid",
                                k=killed_at - 1)
        stalls = [max((b - a for a, b in itertools.pairwise(ats)), default=0.0) for _pid, ats in by_worker]
        refused = ledger.scalar("SELECT count(*) FROM reliable_job_events WHERE event = 'claim_refused'")
        new_leader = _queue_facts(survivor, cluster_queue)[1]
        per_worker = ", ".join(f"{stall:.2f}s" for stall in stalls)
        print(f"\nquorum failover: {total} jobs, leader {leader} killed after {ran_before} runs "
              f"({rate:.0f} jobs/s before); new leader {new_leader}; longest pause {pause:.2f}s (per worker: "
              f"{per_worker}), throughput back {resumed:.2f}s after the kill; all terminal "
              f"{done_at - killed_at:.2f}s after it; {len(duplicates)} jobs ran twice (all fenced), "
              f"{refused} redelivered copies refused by the claim")
        assert new_leader != leader
    finally:
        ledger.close()
