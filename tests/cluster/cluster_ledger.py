"""Reading what the cluster apps did: the ledger of executions and the store's verdicts."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import dramatiq
from sqlalchemy import create_engine, text

import reliable
from reliable.rabbitmq import ReliableRabbitmqBroker
from reliable.states import TERMINAL_STATES

TERMINAL = ", ".join(sorted(f"'{status.value}'" for status in TERMINAL_STATES))
FENCING_EVENTS = ("claim_refused", "stale_commit_rejected", "duplicate_effect", "lease_expired",
                  "lease_expired_backoff")


@contextmanager
def producer(urls: Sequence[str], store_url: str, **options: Any) -> Iterator[ReliableRabbitmqBroker]:
    """A broker with reliable installed (no recovery, no worker), to send jobs like an app."""
    broker = ReliableRabbitmqBroker(url=list(urls), **options)
    middleware = reliable.install(broker, store=store_url, recovery=False, metrics=False, json_logs=False)
    try:
        yield broker
    finally:
        broker.close()
        middleware.store.close()


def send(broker: dramatiq.Broker, queue: str, actor: str, *args: Any, delay: int | None = None) -> str:
    """Enqueue a message for an actor this process does not declare; its job id."""
    message = dramatiq.Message(queue_name=queue, actor_name=actor, args=args, kwargs={}, options={})
    return str(broker.enqueue(message, delay=delay).message_id)


class Ledger:
    """Queries over the ledger table and reliable's tables of one store database."""

    def __init__(self, url: str) -> None:
        self.engine = create_engine(url, pool_size=2)

    def rows(self, sql: str, **params: Any) -> list[Any]:
        """The rows of a query."""
        with self.engine.connect() as conn:
            return list(conn.execute(text(sql), params))

    def scalar(self, sql: str, **params: Any) -> Any:
        """The single value of a query."""
        with self.engine.connect() as conn:
            return conn.execute(text(sql), params).scalar()

    def unfinished(self) -> int:
        """Jobs not in a terminal state."""
        return int(self.scalar(f"SELECT count(*) FROM reliable_jobs WHERE status NOT IN ({TERMINAL})"))

    def runs(self) -> dict[str, int]:
        """Ledger rows per job."""
        return {row[0]: row[1] for row in self.rows("SELECT job_id, count(*) FROM ledger GROUP BY job_id")}

    def events(self, job_id: str) -> list[str]:
        """The event names recorded for a job, oldest first."""
        return [row[0] for row in self.rows("SELECT event FROM reliable_job_events WHERE job_id = :j ORDER BY id",
                                            j=job_id)]

    def close(self) -> None:
        """Release the connections."""
        self.engine.dispose()
