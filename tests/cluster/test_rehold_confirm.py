"""A re-held message is acked only once RabbitMQ confirmed its copy (reliable.rabbitmq.holding).

On the shared RabbitMQ (a queue of the test's own), through a TCP proxy that stands in for a node:
first nothing listens (opening the publishing connection fails), then the proxy swallows the
client's bytes and dies while the confirm is awaited (a node that took the publish and died). In
both the delivery stays held and unacked; once a live node is reachable the copy is confirmed and
the original acked: exactly one copy of the message exists throughout, whatever `confirm_delivery`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pika
import pytest
from dramatiq import Message
from dramatiq.common import current_millis, dq_name, xq_name

from reliable.rabbitmq import ReliableRabbitmqBroker
from reliable.rabbitmq.holding import ReholdingConsumer

from support import free_port, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


class BlackholeProxy:
    """A TCP proxy to the shared RabbitMQ; `blackhole` swallows client->server bytes, `kill` drops all."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.server.getsockname()[1]
        self.blackhole = threading.Event()
        self.swallowed = 0
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.server.accept()
                server = socket.create_connection(self.upstream, timeout=5)
                server.settimeout(None)
                self.sockets += [client, server]
                for pair in ((client, server, True), (server, client, False)):
                    thread = threading.Thread(target=self._pump, args=pair, daemon=True)
                    self.threads.append(thread)
                    thread.start()

    def _pump(self, source: socket.socket, target: socket.socket, upstream: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                if upstream and self.blackhole.is_set():
                    self.swallowed += len(data)
                    continue
                target.sendall(data)

    def kill(self) -> None:
        """Close the listener and every proxied connection (the node died)."""
        self.server.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        for thread in self.threads:
            thread.join(timeout=5)


def _counts(url: str, queue: str) -> list[int]:
    with contextlib.closing(pika.BlockingConnection(pika.URLParameters(url))) as connection:
        channel = connection.channel()
        return [channel.queue_declare(name, passive=True).method.message_count
                for name in (queue, dq_name(queue), xq_name(queue))]


def _url(port: int) -> str:
    return f"amqp://guest:guest@127.0.0.1:{port}/%2F?connection_attempts=1&socket_timeout=2&stack_timeout=3"


@contextlib.contextmanager
def _held(rabbitmq_url: str, queue: str) -> Iterator[tuple[ReliableRabbitmqBroker, ReholdingConsumer]]:
    broker = ReliableRabbitmqBroker(url=rabbitmq_url, middleware=[], consumer_timeout=5)  # hold limit 3 s
    consumer = None
    try:
        broker.declare_queue(queue, ensure=True)
        broker.enqueue(Message(queue_name=queue, actor_name="a", args=(), kwargs={}, options={}), delay=600_000)
        consumer = broker.consume(dq_name(queue), prefetch=10, timeout=200)
        wait_for(lambda: next(consumer) is None and consumer.held, "the delayed delivery to be held", timeout=10,
                 interval=0)
        yield broker, consumer
    finally:
        if consumer is not None:
            consumer.close()
        broker.close()


def test_a_reheld_copy_that_rabbitmq_did_not_confirm_leaves_the_delivery_held(
        rabbitmq_url: str, queue_name: str) -> None:
    proxy = BlackholeProxy(("127.0.0.1", 5672))
    try:
        with _held(rabbitmq_url, queue_name) as (broker, consumer):
            assert not broker.confirm_delivery  # the re-hold confirms whatever the broker's setting
            broker.parameters = pika.URLParameters(_url(free_port()))  # nothing listens: cannot connect
            wait_for(lambda: next(consumer) is None and consumer._connection is None and
                     consumer.held[0][0] <= current_millis(), "the re-hold to come due", timeout=10, interval=0)
            next(consumer)  # the re-publish fails to connect: logged, not raised
            assert len(consumer.held) == 1 and consumer.reheld == 0

            broker.parameters = pika.URLParameters(_url(proxy.port))
            consumer._confirmed_channel()  # the handshake passes through the live proxy
            proxy.blackhole.set()

            def node_dies() -> None:  # once the publish went into the void, while its confirm is awaited
                wait_for(lambda: proxy.swallowed > 0, "the publish to be swallowed", timeout=15)
                broker.parameters = pika.URLParameters(rabbitmq_url)
                proxy.kill()

            killer = threading.Thread(target=node_dies, daemon=True)
            killer.start()
            next(consumer)  # blocks on the confirm until the node dies: kept held
            killer.join(timeout=20)
            assert len(consumer.held) == 1 and consumer.reheld == 0
            assert _counts(rabbitmq_url, queue_name) == [0, 0, 0]  # the one copy is still our unacked delivery

            wait_for(lambda: next(consumer) is None and consumer.reheld == 1, "the confirmed re-hold", timeout=10,
                     interval=0)
        wait_for(lambda: sum(_counts(rabbitmq_url, queue_name)) == 1, "exactly one copy after close", timeout=10,
                 context=lambda: str(_counts(rabbitmq_url, queue_name)))
        assert _counts(rabbitmq_url, queue_name) == [0, 1, 0]
    finally:
        proxy.kill()

