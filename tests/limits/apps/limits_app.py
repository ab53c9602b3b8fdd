"""A Dramatiq app for the limits integration tests: actors with `limits=`, a ledger of their runs.

Settings come from environment variables, so each test runs it on its own queue, store and ledger.
Each run appends "S <name> <job id> <time>" when it starts and "E <name> <job id> <time>" when it
ends to the ledger file (one O_APPEND write per line: lines of several processes never mix).
"""

from __future__ import annotations

import fcntl
import os
import time

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
reliable.install(
    broker,
    store=os.environ["RELIABLE_TEST_STORE"],
    lease_ttl=float(os.environ.get("RELIABLE_TEST_LEASE_TTL", "2")),
    heartbeat_interval=float(os.environ.get("RELIABLE_TEST_HEARTBEAT", "0.5")),
    recovery_interval=float(os.environ.get("RELIABLE_TEST_RECOVERY_INTERVAL", "0.5")),
)
dramatiq.set_broker(broker)

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
LEDGER = os.environ["LIMITS_LEDGER"]
CONCURRENCY = int(os.environ.get("LIMITS_CONCURRENCY", "2"))


def _note(kind: str, name: str) -> None:
    job_id = reliable.current_job().job_id
    line = f"{kind} {name} {job_id} {time.time():.6f}\n".encode()
    fd = os.open(LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@dramatiq.actor(queue_name=QUEUE, limits=reliable.Limits(concurrency=CONCURRENCY, delay=0.1))
def limited(seconds: float) -> None:
    """Run for `seconds`: at most CONCURRENCY at once across every worker process."""
    _note("S", "limited")
    time.sleep(seconds)
    _note("E", "limited")


@dramatiq.actor(queue_name=QUEUE, limits=reliable.Limits(concurrency=1, delay=0.1), time_limit=600_000)
def held(release: str, timeout: float) -> None:
    """One at a time; runs until the file `release` exists (the test decides when it ends)."""
    _note("S", "held")
    deadline = time.monotonic() + timeout
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} was not created within {timeout}s")
        time.sleep(0.05)
    _note("E", "held")


class TooManyRequests(Exception):
    """What an HTTP client raises for a 429: the policy's http-429 rule classes it rate_limited."""

    status = 429

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"429 Too Many Requests (Retry-After: {retry_after})")
        self.retry_after = retry_after


def _fake_api_call() -> int:
    """The fake API's call counter (shared by every process through a locked file); this call's number."""
    path = os.environ["LIMITS_API_COUNTER"]
    with open(path, "a+") as counter:
        fcntl.flock(counter, fcntl.LOCK_EX)
        counter.seek(0)
        count = int(counter.read() or 0) + 1
        counter.seek(0)
        counter.truncate()
        counter.write(str(count))
        return count


@dramatiq.actor(queue_name=QUEUE, limits=reliable.Limits(concurrency=4, quiet=1.5, step=2, delay=0.1))
def call_api(seconds: float) -> None:
    """Call the fake API: its first LIMITS_API_FAIL_FIRST calls answer 429 with a Retry-After."""
    _note("S", "call_api")
    try:
        if _fake_api_call() <= int(os.environ.get("LIMITS_API_FAIL_FIRST", "0")):
            raise TooManyRequests(retry_after=0.2)
        time.sleep(seconds)
    finally:
        _note("E", "call_api")
