"""A small Dramatiq app: sign-up e-mails and thumbnails.

examples/plain_app.py is the app as it was; examples/reliable_app.py is the same app after adding
reliable: two added lines (see examples/README.md, and `diff -u examples/plain_app.py examples/reliable_app.py`).

Run from the repository root, with RabbitMQ at BROKER_URL (default amqp://guest:guest@127.0.0.1:5672/):

    .venv/bin/dramatiq examples.plain_app -p 1 -t 4                 # the worker
    .venv/bin/python -m examples.plain_app                          # enqueue a few messages

The reliable version needs its state store once: `export RELIABLE_STORE=sqlite:///reliable.db` (the
app's default; postgresql+psycopg://... for PostgreSQL) and `.venv/bin/reliable db upgrade`, then the
same two commands with examples.reliable_app, and `.venv/bin/reliable jobs list` to see the jobs.
BROKER_URL=stub:// uses Dramatiq's in-process StubBroker instead (the tests do).
"""

from __future__ import annotations

import logging
import os

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
from dramatiq.brokers.stub import StubBroker

BROKER_URL = os.environ.get("BROKER_URL", "amqp://guest:guest@127.0.0.1:5672/")
broker = StubBroker() if BROKER_URL == "stub://" else RabbitmqBroker(url=BROKER_URL)
dramatiq.set_broker(broker)

logger = logging.getLogger("examples.app")
SENT: list[str] = []  # what the actors did, for the tests


@dramatiq.actor(queue_name="emails", max_retries=3)
def send_welcome_email(user_id: int) -> None:
    """Send the welcome e-mail (pretend)."""
    SENT.append(f"welcome:{user_id}")
    logger.info("welcome e-mail sent to user %s", user_id)


@dramatiq.actor(queue_name="images", max_retries=5, min_backoff=1000)
def make_thumbnail(image_id: str, size: int = 128) -> None:
    """Render a thumbnail (pretend); a missing image is a bad input."""
    if not image_id:
        raise ValueError("image_id is empty")
    SENT.append(f"thumbnail:{image_id}:{size}")


if __name__ == "__main__":
    for user in range(3):
        send_welcome_email.send(user)
    make_thumbnail.send("cat.png", size=256)
    print("enqueued 4 messages")
