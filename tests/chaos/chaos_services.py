"""Restarting the real RabbitMQ and PostgreSQL of this machine, always bounded and always restored.

Every outage goes through `rabbitmq_outage` / `postgres_outage`: a context manager that stops the
service, and on exit (also on an exception or a pytest timeout) starts it again and waits until it
serves clients, within a timeout. `ensure_services_up` is the last line of defence a fixture runs
after the test, whatever happened.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pika
import psycopg

from support import PG_ADMIN_URL, RABBITMQ_URL, port_open

logger = logging.getLogger("chaos.services")

#: How long a service may take to serve again after its start command.
READY_TIMEOUT = 90.0
#: How long one control command (rabbitmqctl, pg_ctlcluster) may take.
COMMAND_TIMEOUT = 60.0


class ServiceError(RuntimeError):
    """A service could not be controlled or did not come back in time."""


def _run(argv: list[str], timeout: float = COMMAND_TIMEOUT) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ServiceError(f"{' '.join(argv)} took more than {timeout}s") from exc
    if done.returncode != 0:
        raise ServiceError(f"{' '.join(argv)} exited {done.returncode}: {(done.stderr or done.stdout).strip()}")
    return done.stdout


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> float:
    """Poll `predicate()` until true; its duration; ServiceError after `timeout` s."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.2)
    raise ServiceError(f"{what} not ready after {timeout}s")


# -- PostgreSQL ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PgCluster:
    """The Debian-style cluster serving 127.0.0.1:5432 (`pg_lsclusters`)."""

    version: str
    name: str

    def command(self, action: str, *options: str) -> list[str]:
        """The pg_ctlcluster command line for `action` (bypasses systemd: there is none here)."""
        return ["pg_ctlcluster", "--skip-systemctl-redirect", *options, self.version, self.name, action]


def pg_cluster(port: int = 5432) -> PgCluster | None:
    """The local cluster on `port`, or None without pg_ctlcluster/pg_lsclusters or such a cluster."""
    if not (shutil.which("pg_ctlcluster") and shutil.which("pg_lsclusters")):
        return None
    try:
        listing = _run(["pg_lsclusters", "--no-header"], timeout=20)
    except ServiceError:
        return None
    for line in listing.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[2] == str(port):
            return PgCluster(fields[0], fields[1])
    return None


def postgres_ready() -> bool:
    """Whether PostgreSQL accepts connections and answers a query."""
    if not port_open("127.0.0.1", 5432):
        return False
    dsn = PG_ADMIN_URL.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            return conn.execute("SELECT 1").fetchone() == (1,)
    except psycopg.Error:
        return False


def start_postgres(cluster: PgCluster) -> float:
    """Start the cluster (a no-op if it runs) and wait until it answers queries; seconds waited."""
    if not postgres_ready():
        with contextlib.suppress(ServiceError):  # "already running" exits non-zero too
            _run(cluster.command("start"))
    return _wait(postgres_ready, READY_TIMEOUT, "PostgreSQL")


@contextlib.contextmanager
def postgres_outage(cluster: PgCluster, hold: float) -> Iterator[dict[str, float]]:
    """Stop PostgreSQL (fast shutdown: sessions are cut), keep it down `hold` s, start it again.

    Yields a dict filled with `down_at`, `up_at` (monotonic) and `ready_after` (start to ready).
    """
    figures: dict[str, float] = {}
    try:
        _run(cluster.command("stop", "-m", "fast"))
        figures["down_at"] = time.monotonic()
        logger.warning("chaos: PostgreSQL stopped")
        yield figures
        time.sleep(max(0.0, hold - (time.monotonic() - figures["down_at"])))
    finally:
        figures["ready_after"] = start_postgres(cluster)
        figures["up_at"] = time.monotonic()
        logger.warning("chaos: PostgreSQL serving again")


# -- RabbitMQ --------------------------------------------------------------------------------------


def rabbitmq_tools() -> bool:
    """Whether rabbitmqctl and rabbitmq-server are installed."""
    return bool(shutil.which("rabbitmqctl") and shutil.which("rabbitmq-server"))


def rabbitmq_ready() -> bool:
    """Whether RabbitMQ accepts an AMQP connection and opens a channel."""
    if not port_open("127.0.0.1", 5672):
        return False
    try:
        params = pika.URLParameters(RABBITMQ_URL)
        params.socket_timeout = 3
        params.blocked_connection_timeout = 3
        connection = pika.BlockingConnection(params)
    except Exception:
        return False
    try:
        connection.channel()
        return True
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            connection.close()


def start_rabbitmq() -> float:
    """Start the RabbitMQ application (or the whole node if it is down); wait until it serves; seconds."""
    if not rabbitmq_ready():
        try:
            _run(["rabbitmqctl", "start_app"])
        except ServiceError:
            logger.warning("chaos: rabbitmqctl start_app failed; starting the node", exc_info=True)
            with contextlib.suppress(ServiceError):
                _run(["rabbitmq-server", "-detached"])
    return _wait(rabbitmq_ready, READY_TIMEOUT, "RabbitMQ")


@contextlib.contextmanager
def rabbitmq_outage(hold: float) -> Iterator[dict[str, float]]:
    """`rabbitmqctl stop_app` (every connection closed, durable queues kept), `hold` s, `start_app`."""
    figures: dict[str, float] = {}
    try:
        _run(["rabbitmqctl", "stop_app"])
        figures["down_at"] = time.monotonic()
        logger.warning("chaos: RabbitMQ application stopped")
        yield figures
        time.sleep(max(0.0, hold - (time.monotonic() - figures["down_at"])))
    finally:
        figures["ready_after"] = start_rabbitmq()
        figures["up_at"] = time.monotonic()
        logger.warning("chaos: RabbitMQ serving again")


def ensure_services_up(cluster: PgCluster | None) -> list[str]:
    """Bring back whatever is down; what had to be restarted (empty when all was well)."""
    restarted = []
    if rabbitmq_tools() and not rabbitmq_ready():
        start_rabbitmq()
        restarted.append("RabbitMQ")
    if cluster is not None and not postgres_ready():
        start_postgres(cluster)
        restarted.append("PostgreSQL")
    return restarted


class ServiceGuard:
    """Brings the services back (bounded waits) and remembers whether it had to."""

    def __init__(self, cluster: PgCluster | None) -> None:
        self.cluster = cluster
        self.restarted: list[str] = []

    def restore(self) -> None:
        """Start whatever is down and wait until it serves."""
        self.restarted += ensure_services_up(self.cluster)
