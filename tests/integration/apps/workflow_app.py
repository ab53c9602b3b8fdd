"""A Dramatiq app with workflow nodes, for the workflow integration tests (real workers).

Configured by environment variables like units_app. The actors count what they do in tables of
the test's own PostgreSQL database (the store's database), created by the test:

- wf_runs(node, job_id, attempt, value, pid): one row per attempt of a node, written as it starts;
- wf_broken(node): a node listed there raises ValueError (FAILED at once under the default
  policy: `invalid_input`); the test deletes the row to "fix" it;
- wf_applied(op_key primary key, node, job_id, hits): the side effect of `slow`, applied with
  the job's operation key as idempotency key (a replay only increments `hits`), then recorded with
  `record_effect` (False on a replay: wf_runs.replay is set).

`define(inputs)` is the 20-node DAG of `step` nodes (its shape: see the function); `changed` is the
same DAG with new inputs, for `reliable workflow resume --definition workflow_app:changed`.
`define_slow(seconds)` is the DAG of `slow` nodes for the SIGKILL test.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from sqlalchemy import Engine, create_engine, text

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    policies=os.environ.get("RELIABLE_TEST_POLICY") or None,
    lease_ttl=float(os.environ.get("RELIABLE_TEST_LEASE_TTL", "2")),
    heartbeat_interval=float(os.environ.get("RELIABLE_TEST_HEARTBEAT", "0.5")),
    recovery_interval=float(os.environ.get("RELIABLE_TEST_RECOVERY_INTERVAL", "0.5")),
    sweep_after=float(os.environ.get("RELIABLE_TEST_SWEEP_AFTER", "300")),
)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]

#: The new inputs `changed` declares (each node's input is "v1" unless listed).
CHANGED = {"a3": "v2", "side1": "v2"}

_engine: Engine | None = None


def _db() -> Engine:
    """The test's database (created in the worker process that uses it, after Dramatiq's fork)."""
    global _engine
    if _engine is None:
        _engine = create_engine(os.environ["RELIABLE_TEST_STORE"], pool_size=2, max_overflow=8)
    return _engine


def _started(name: str, value: str | None = None) -> reliable.JobContext:
    job = reliable.current_job()
    with _db().begin() as conn:
        conn.execute(text("INSERT INTO wf_runs (node, job_id, attempt, value, pid) "
                          "VALUES (:node, :job_id, :attempt, :value, :pid)"),
                     {"node": name, "job_id": job.job_id, "attempt": job.attempt, "value": value,
                      "pid": os.getpid()})
    return job


@dramatiq.actor(queue_name=QUEUE)
def step(name: str, value: str, *parents: str) -> str:
    """A node: counted in wf_runs, fails while listed in wf_broken, returns a text naming its input
    and its parents' results (appended by the workflow: pass_results)."""
    job = _started(name, value)
    assert job.workflow_node == name, (job.workflow_node, name)
    with _db().connect() as conn:
        broken = conn.execute(text("SELECT 1 FROM wf_broken WHERE node = :node"), {"node": name}).first()
    if broken:
        raise ValueError(f"node {name} is broken (listed in wf_broken)")
    return f"{name}[{value}]({','.join(parents)})"


@dramatiq.actor(queue_name=QUEUE, time_limit=120_000)
def slow(name: str, before: float, after: float) -> str:
    """A node that works `before` seconds, applies one side effect (with the operation key as
    idempotency key: a replay increments `hits`, adds no row), records it, then works `after` seconds."""
    job = _started(name)
    time.sleep(before)  # the node's work, part 1
    key = job.operation_key("apply")
    with _db().begin() as conn:
        conn.execute(text("INSERT INTO wf_applied (op_key, node, job_id, hits) VALUES (:key, :node, :job_id, 1) "
                          "ON CONFLICT (op_key) DO UPDATE SET hits = wf_applied.hits + 1"),
                     {"key": key, "node": name, "job_id": job.job_id})
    if not job.record_effect("apply"):  # a replay: the store counted it as a duplicate
        with _db().begin() as conn:
            conn.execute(text("UPDATE wf_runs SET replay = true WHERE job_id = :job_id AND attempt = :attempt"),
                         {"job_id": job.job_id, "attempt": job.attempt})
    time.sleep(after)  # the node's work, part 2
    return name


def define(inputs: Mapping[str, str] | None = None) -> reliable.Workflow:
    """The 20-node DAG: src fans out to a0..a3; b_i waits for a_i and a_(i+1)%4; c_i for b_i; d0 for
    c0, c1 and d1 for c2, c3; e_i for d_i; a side chain side0 -> side1 -> side2 after src. Every
    node but src receives its parents' results. `inputs`: a node's input where it is not "v1"."""
    given = dict(inputs or {})

    def node(name: str, *after: str) -> Any:
        return reliable.node(name, step.message(name, given.get(name, "v1")), after=after, pass_results=bool(after))

    return reliable.workflow("wf-it-20", [
        node("src"),
        *(node(f"a{i}", "src") for i in range(4)),
        # b3 lists a3 before a0: it receives their results in its after= order, a3's first
        # (docs/workflows.md, pass_results).
        *(node(f"b{i}", f"a{i}", f"a{(i + 1) % 4}") for i in range(4)),
        *(node(f"c{i}", f"b{i}") for i in range(4)),
        node("d0", "c0", "c1"), node("d1", "c2", "c3"),
        node("e0", "d0"), node("e1", "d1"),
        node("side0", "src"), node("side1", "side0"), node("side2", "side1"),
    ])


def changed() -> reliable.Workflow:
    """The DAG as declared after a change of inputs (CHANGED)."""
    return define(CHANGED)


def define_slow(seconds: float) -> reliable.Workflow:
    """src -> p0..p5 -> join -> q0..q2 -> end: 12 `slow` nodes applying their effect half-way
    through `seconds`, except the fan-out p_i, which applies it after (0.2 + 0.4 i) * `seconds` and
    works `seconds` more (their effects land at different times)."""
    def node(name: str, *after: str, before: float = seconds / 2, then: float = seconds / 2) -> Any:
        return reliable.node(name, slow.message(name, before, then), after=after)

    fan = [f"p{i}" for i in range(6)]
    tail = [f"q{i}" for i in range(3)]
    return reliable.workflow("wf-it-slow", [
        node("src"), *(node(name, "src", before=(0.2 + 0.4 * i) * seconds, then=seconds) for i, name in enumerate(fan)),
        node("join", *fan), *(node(name, "join") for name in tail), node("end", *tail),
    ])
