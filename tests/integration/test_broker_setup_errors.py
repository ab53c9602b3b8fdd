"""Broker mistakes fail at once; a broker outage is waited for, said, and never called ready.

Real RabbitMQ (127.0.0.1:5672), real `dramatiq` and `reliable worker` processes running
apps/broker_setup_app.py (reliable installed with `reliable.install(broker, ...)`). A mistake (the
login refused, a virtual host that does not exist, a URL pika does not support) ends the process
non-zero with one line naming the problem and its fix, and the password's text appears nowhere in
its output. An outage (a closed local port) is retried with a line naming host:port and the cause;
no "ready" line appears while it lasts (observed until the retry line appeared twice), and once
something answers on that port (a forwarder to the real RabbitMQ) the worker boots.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from reliable.store import StateStore

from support import free_port, wait_for

pytestmark = [pytest.mark.integration]

APPS = Path(__file__).parent / "apps"
BIN = Path(sys.executable).parent
#: A process must exit on its own within this (its start costs seconds on a loaded machine).
PROCESS_TIMEOUT = 90.0
PASSWORD = "h9-Wr0ng-pw"  # distinctive: it must never be printed
URL_PASSWORD = "h9-url-s3cret"


@dataclass(frozen=True)
class Mistake:
    """A broker URL that cannot work, and what the one line must say."""

    url: str
    says: tuple[str, ...]
    secret: str | None  # text that must appear nowhere in the output


MISTAKES = {
    "login refused": Mistake(f"amqp://guest:{PASSWORD}@127.0.0.1:5672/%2F", (
        "RabbitMQ at 127.0.0.1:5672 refused the login of user 'guest'", "ACCESS_REFUSED",
        "check the user and password in the broker URL"), PASSWORD),
    "unknown vhost": Mistake("amqp://guest:guest@127.0.0.1:5672/%2Fnosuchvhost", (
        "RabbitMQ at 127.0.0.1:5672 refused virtual host '/nosuchvhost'", "vhost /nosuchvhost not found",
        "fix the vhost in the broker URL"), None),
    "unsupported URL": Mistake(f"redis://app:{URL_PASSWORD}@127.0.0.1:6379/0", (
        "unsupported RabbitMQ URL", "Unexpected URL scheme 'redis'", "write amqp://user:password@host:5672/vhost"),
        URL_PASSWORD),
}

# (surface, mistake, broker kind): Dramatiq's RabbitmqBroker ("plain") and ReliableRabbitmqBroker
# ("reliable"). Not here: `dramatiq` with a plain broker and an unsupported URL, which fails in the
# app's own import before reliable is installed (pika's ValueError, exit 1: docs/rabbitmq.md).
RUNS = [
    ("dramatiq", "login refused", "plain"), ("dramatiq", "login refused", "reliable"),
    ("dramatiq", "unknown vhost", "plain"), ("dramatiq", "unsupported URL", "reliable"),
    ("reliable worker", "login refused", "plain"), ("reliable worker", "unknown vhost", "reliable"),
    ("reliable worker", "unsupported URL", "plain"), ("reliable worker", "unsupported URL", "reliable"),
]


@pytest.fixture
def app_env(tmp_path: Path, queue_name: str) -> Callable[[str, str], dict[str, str]]:
    """The env of broker_setup_app for a broker URL and kind: a migrated SQLite store of this test."""
    store = f"sqlite:///{tmp_path / 'store.db'}"
    StateStore(store).upgrade()

    def env(url: str, kind: str) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(APPS), "BROKER_SETUP_URL": url, "BROKER_SETUP_KIND": kind,
                "BROKER_SETUP_STORE": store, "BROKER_SETUP_QUEUE": queue_name}

    return env


def command(surface: str, *dramatiq_options: str) -> list[str]:
    if surface == "dramatiq":
        return [str(BIN / "dramatiq"), "broker_setup_app", "-p", "1", "-t", "1", *dramatiq_options]
    return [str(BIN / "reliable"), "worker", "broker_setup_app", "-p", "1", "-t", "1", "-P", str(APPS)]


@pytest.mark.parametrize(("surface", "mistake", "kind"), RUNS)
def test_a_broker_mistake_stops_the_worker_with_one_line_and_the_fix(
        surface: str, mistake: str, kind: str, app_env: Callable[[str, str], dict[str, str]]) -> None:
    case = MISTAKES[mistake]
    done = subprocess.run(command(surface), env=app_env(case.url, kind), capture_output=True, text=True,
                          timeout=PROCESS_TIMEOUT, check=False)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output[-3000:]
    if surface == "reliable worker":
        assert done.returncode == 2, output[-3000:]  # a configuration error: not restarted
        assert "configuration error" in done.stderr.splitlines()[-1]
    lines = [line for line in output.splitlines() if all(part in line for part in case.says)]
    assert len(lines) == 1, f"no single line says {case.says}:\n{output[-3000:]}"
    assert "ready for action" not in output
    assert "cannot be reached" not in output  # a mistake is not taken for an outage
    if case.secret is not None:
        assert case.secret not in output


class Forwarder:
    """Listens on 127.0.0.1:`port` and forwards every connection to the shared RabbitMQ (RabbitMQ comes back)."""

    def __init__(self, port: int) -> None:
        self.server = socket.create_server(("127.0.0.1", port))
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.server.accept()
                upstream = socket.create_connection(("127.0.0.1", 5672), timeout=5)
                upstream.settimeout(None)
                self.sockets += [client, upstream]
                for source, target in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(source, target), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, target: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.server.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.close()


@contextlib.contextmanager
def started(surface: str, env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    # Dramatiq's main process forwards its worker processes' output only once they are ready or
    # --worker-fork-timeout (default 30 s) has passed: 1 s lets the retry lines through without the wait.
    with log.open("ab") as out:
        proc = subprocess.Popen(command(surface, "--worker-fork-timeout", "1000"), env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


@pytest.mark.parametrize("surface", ["dramatiq", "reliable worker"])
def test_an_unreachable_broker_is_retried_naming_host_and_port_and_nothing_says_ready(
        surface: str, app_env: Callable[[str, str], dict[str, str]], tmp_path: Path, rabbitmq_url: str) -> None:
    port = free_port()  # nothing listens there: connections are refused
    log = tmp_path / "worker.log"
    retry = f"RabbitMQ at 127.0.0.1:{port} cannot be reached (AMQPConnectionError: "
    with started(surface, app_env(f"amqp://guest:guest@127.0.0.1:{port}/%2F", "plain"), log) as proc:
        def output() -> str:
            return log.read_text(errors="replace")

        def retries() -> list[str]:
            return [line for line in output().splitlines() if retry in line]

        wait_for(lambda: len(retries()) >= 2, "the retry line twice", timeout=60, context=output)
        first, second = retries()[:2]
        assert "ConnectionRefusedError" in first and "next try in 1s (attempt 1)" in first, first
        assert "next try in 2s (attempt 2)" in second, second
        assert "ready for action" not in output() and "child_ready" not in output()
        assert proc.poll() is None  # an outage is waited for, not a reason to exit
        forwarder = Forwarder(port)  # RabbitMQ answers on that port from now on
        try:
            wait_for(lambda: "ready for action" in output(), "the worker ready once RabbitMQ answers", timeout=60,
                     context=output)
            assert f"RabbitMQ at 127.0.0.1:{port} answers after" in output()
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
            forwarder.close()
