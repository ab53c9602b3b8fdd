"""The benchmark's worker app: a no-op actor, with or without reliable (BENCH_MODE=plain|reliable)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

broker = RabbitmqBroker(url=os.environ["BENCH_BROKER"])
if os.environ.get("BENCH_MODE", "plain") != "plain":
    import reliable

    reliable.install(broker, store=os.environ["BENCH_STORE"], recovery=False,
                     metrics=os.environ.get("BENCH_METRICS", "1") == "1",
                     json_logs=os.environ.get("BENCH_JSON_LOGS", "0") == "1")
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=os.environ["BENCH_QUEUE"])
def noop(n: int) -> None:
    """Do nothing: the benchmark measures the framework, not the job."""
