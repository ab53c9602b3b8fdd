"""The benchmark's producer: threads sending no-op messages, with plain Dramatiq or tracked by reliable.

    python bench/producer.py KIND QUEUE SENDS THREADS STORE|- DIR

KIND: plain (Dramatiq's send, no reliable), tracked (reliable installed: each send registers its job),
tracked-async (the same with `send_commit="asynchronous"`), many (`enqueue_many`, 100 messages per
call). SENDS messages in all, shared by THREADS threads (for `many`, SENDS / 100 calls). Run by
bench/throughput.py (its producer and end-to-end modes), which reads the CPU of this process.

It declares the actor, warms up (a few sends per thread, not counted), writes `DIR/<pid>.ready`,
waits for `DIR/go`, then every thread sends its share; it writes `DIR/<pid>.json`: the first send's
start and the last send's end (time.monotonic(), one clock for every process of the machine) and
each send's (or call's) latency in seconds. RabbitmqBroker keeps one connection per thread.
BENCH_SEND_RATE (sends per second of this process, unset or 0: as fast as they go) paces the counted
sends: each thread sends on its own schedule, so the worker sees a steady moderate load whatever
the kind (an end-to-end comparison of plain and reliable at the same rate).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

#: Messages per `enqueue_many` call (KIND many).
BULK = 100
#: Sends per thread before the run, not counted: connections opened, statements prepared.
WARM_UP = 20


def main() -> None:
    """Send as the arguments say (see the module doc)."""
    kind, queue, sends, threads, store, directory = sys.argv[1:7]
    total, workers = int(sends), int(threads)
    broker = RabbitmqBroker(url=os.environ.get("BENCH_BROKER", "amqp://guest:guest@127.0.0.1:5672/"))
    middleware: Any = None
    if kind != "plain":
        import reliable

        # Only when asked: a --base tree older than the option runs the other kinds.
        options = {"send_commit": "asynchronous"} if kind == "tracked-async" else {}
        middleware = reliable.install(broker, store=store, recovery=False, metrics=False, json_logs=False, **options)

    @dramatiq.actor(broker=broker, queue_name=queue, actor_name="noop")
    def noop(n: int) -> None:
        """The worker's no-op (bench/bench_app.py declares the same actor)."""

    latencies: list[list[float]] = [[] for _ in range(workers)]
    go = Path(directory, "go")
    rate = float(os.environ.get("BENCH_SEND_RATE") or 0)
    period = workers / rate if rate > 0 else 0.0  # each thread's time between two sends
    begun = [0.0]

    def send(index: int, count: int, warm: bool) -> None:
        own = latencies[index]
        if kind == "many":
            for call in range(count // BULK):
                messages = [noop.message(index * total + call * BULK + n) for n in range(BULK)]
                began = time.perf_counter()
                middleware.enqueue_many(broker, messages)
                own.append(time.perf_counter() - began)
            return
        for n in range(count):
            if period and not warm and (wait := begun[0] + (n + index / workers) * period - time.perf_counter()) > 0:
                time.sleep(wait)
            began = time.perf_counter()
            noop.send(n)
            if not warm:
                own.append(time.perf_counter() - began)

    warm = [threading.Thread(target=send, args=(i, BULK if kind == "many" else WARM_UP, True)) for i in range(workers)]
    for thread in warm:
        thread.start()
    for thread in warm:
        thread.join()
    for own in latencies:
        own.clear()
    Path(directory, f"{os.getpid()}.ready").write_text("")
    while not go.exists():
        time.sleep(0.005)
    share = [total // workers + (1 if i < total % workers else 0) for i in range(workers)]
    runs = [threading.Thread(target=send, args=(i, share[i], False)) for i in range(workers)]
    begun[0] = time.perf_counter()
    start = time.monotonic()
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join()
    end = time.monotonic()
    result = {"start": start, "end": end, "latencies": [value for own in latencies for value in own]}
    Path(directory, f"{os.getpid()}.json").write_text(json.dumps(result))
    broker.close()


if __name__ == "__main__":
    main()
