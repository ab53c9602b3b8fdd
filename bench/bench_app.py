"""The benchmark's worker app: a no-op actor, with or without reliable (BENCH_MODE=plain|reliable).

BENCH_RECOVERY=1 runs reliable's recovery loop in every worker process (the production default).
BENCH_STAMPS=DIR adds `stamps.Stamps` (first start, last ack, acks per process) ahead of every other
middleware, so the window starts before reliable's claim of the first message.
BENCH_SCHED_BATCH=1 runs each worker process under Linux's SCHED_BATCH policy (an experiment: a thread woken
by another does not preempt it, so fewer GIL convoys; see the worker's switches/job).
BENCH_SWITCH_INTERVAL=S sets the worker's `sys.setswitchinterval(S)` (an experiment: how long a thread back
from I/O, a group commit's leader say, may wait for the GIL; CPython's default is 0.005).
"""

from __future__ import annotations

import os
import sys
import time

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

if os.environ.get("BENCH_SCHED_BATCH") == "1":  # an experiment: no wake-up preemption between the worker's threads
    os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
if os.environ.get("BENCH_SWITCH_INTERVAL"):
    sys.setswitchinterval(float(os.environ["BENCH_SWITCH_INTERVAL"]))
broker = RabbitmqBroker(url=os.environ["BENCH_BROKER"])
if os.environ.get("BENCH_MODE", "plain") != "plain":
    import reliable

    reliable.install(broker, store=os.environ["BENCH_STORE"], recovery=os.environ.get("BENCH_RECOVERY") == "1",
                     metrics=os.environ.get("BENCH_METRICS", "1") == "1",
                     json_logs=os.environ.get("BENCH_JSON_LOGS", "0") == "1",
                     group_commit=os.environ.get("BENCH_GROUP_COMMIT", "1") == "1",
                     **({"claims_ahead": True} if os.environ.get("BENCH_CLAIMS_AHEAD") == "1" else {}))
    if os.environ.get("BENCH_LOOKS") == "alone":  # mode reliable-pg-fast-alone: one read per fast-path look
        from reliable.compat import dramatiq_internals

        dramatiq_internals.VERIFIED_WORK_QUEUE = frozenset()
if os.environ.get("BENCH_STAMPS"):
    from stamps import Stamps

    broker.add_middleware(Stamps(os.environ["BENCH_STAMPS"]), before=type(broker.middleware[0]))
dramatiq.set_broker(broker)


#: The queue of every actor but the fast-path one.
OTHER_QUEUE = os.environ["BENCH_QUEUE"] + ("_other" if os.environ.get("BENCH_FAST_QUEUE") == "1" else "")


@dramatiq.actor(queue_name=OTHER_QUEUE)
def noop(n: int) -> None:
    """Do nothing: the benchmark measures the framework, not the job."""


if os.environ.get("BENCH_MODE", "plain") != "plain":

    @dramatiq.actor(queue_name=os.environ["BENCH_QUEUE"], fast_path=True)
    def fast_noop(n: int) -> None:
        """Do nothing on reliable's fast path (no claim before the run; one commit after it)."""

    @dramatiq.actor(queue_name=OTHER_QUEUE, limits=reliable.Limits(concurrency=64))
    def limited_noop(n: int) -> None:
        """Do nothing under a concurrency limit never reached: the cost of taking and freeing a slot."""


@dramatiq.actor(queue_name=OTHER_QUEUE)
def nap(seconds: float) -> None:
    """Sleep a little: keeps every worker thread busy at once (the connection count bench)."""
    time.sleep(seconds)


@dramatiq.actor(queue_name=OTHER_QUEUE)
def steps(units: int, seconds: float) -> None:
    """Record an effect and a checkpoint per unit (reliable mode only): the store's general path too."""
    import reliable

    job = reliable.current_job()
    for unit in range(job.checkpoint_value or 0, units):
        job.record_effect(unit)
        time.sleep(seconds)
        job.checkpoint(unit + 1)
