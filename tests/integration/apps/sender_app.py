"""A producer process for the producer crash test: 8 threads sending tracked messages until killed.

Reads RELIABLE_TEST_BROKER, RELIABLE_TEST_STORE, RELIABLE_TEST_QUEUE and RELIABLE_TEST_SENT (a file).
Publishes are confirmed (a send that returned is in RabbitMQ), and each send that returned appends
its message id to the file (one write per line, O_APPEND: whole lines even when killed).
"""

from __future__ import annotations

import os
import threading

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"], confirm_delivery=True)
reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"], recovery=False, metrics=False, json_logs=False,
                 send_commit=os.environ.get("RELIABLE_TEST_SEND_COMMIT", "synchronous"))


@dramatiq.actor(broker=broker, queue_name=os.environ["RELIABLE_TEST_QUEUE"])
def note(n: int) -> None:
    """Never run here: the test reads the messages from the queue."""


sent = os.open(os.environ["RELIABLE_TEST_SENT"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)


def keep_sending(thread: int) -> None:
    for n in range(1_000_000):
        message = note.message(thread * 1_000_000 + n)
        broker.enqueue(message)
        os.write(sent, f"{message.message_id}\n".encode())


threads = [threading.Thread(target=keep_sending, args=(i,)) for i in range(8)]
for started in threads:
    started.start()
for started in threads:
    started.join()
