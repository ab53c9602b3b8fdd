"""A StubBroker with reliable installed and a real Worker: what the middleware tests run jobs on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dramatiq
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

import reliable
from reliable.store import StateStore


@dataclass
class Harness:
    """A broker with reliable installed, its store and its worker."""

    broker: StubBroker
    store: StateStore
    middleware: reliable.ReliableMiddleware
    worker: Worker

    def join(self, queue: str = "default") -> None:
        """Wait until the queue (and its delay queue) is drained and the workers are idle."""
        self.broker.join(queue, fail_fast=False)
        self.worker.join()

    def run(self, queue: str = "default") -> None:
        """Start the worker and wait until `queue` is drained."""
        self.worker.start()
        self.join(queue)

    def events(self, job_id: str) -> list[str]:
        """The names of the job's events, oldest first."""
        return [e.event for e in self.store.events(job_id)]

    def close(self) -> None:
        """Stop the worker, close the broker and the store."""
        self.worker.stop()
        self.broker.close()
        self.store.close()


def make_harness(store_url: str, policy: Path, *, threads: int = 4, **install: Any) -> Harness:
    """A StubBroker (booted, the global broker) with reliable installed on `store_url` (no recovery
    loop; `install` adds or overrides options) and a worker of `threads` threads, not started."""
    broker = StubBroker()
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    middleware = reliable.install(broker, store=store_url, policies=policy, **{"recovery": False, **install})
    return Harness(broker, middleware.store, middleware, Worker(broker, worker_timeout=50, worker_threads=threads))
