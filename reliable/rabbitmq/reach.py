"""Whether RabbitMQ answers, and why not: a misconfiguration stops at once, an outage is waited for.

`describe_failure` is a failed query's cause as one redacted line (the exception's class and
message; pika's connection errors often have an empty `str()`, their cause sits in `args`).
`misconfiguration` tells a mistake from an outage: authentication refused, a virtual host that does
not exist or is not allowed, a TLS handshake that fails cannot pass by waiting, and get one line
naming the problem and the fix; anything else (a refused connection, a timeout) is an outage.
`wait_for_broker` is the worker boot's probe: a misconfiguration raises BrokerConfigError; an outage
is logged (the nodes' host:port and the cause) and retried after BACKOFF's delays (the last one
repeated), until RabbitMQ answers or a TERM asks the process to stop (BrokerUnreachable). No line
ever holds a password: a URL's is masked (`reliable.redact`), and the messages quoted are the
broker's and pika's, which hold none.
"""

from __future__ import annotations

import copy
import logging
import signal
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import BrokerConfigError, BrokerUnreachable
from ..redact import redact_secrets

__all__ = ["BACKOFF", "PROBE_TIMEOUT", "URL_FIX", "describe_failure", "explain", "misconfiguration",
           "node_addresses", "nodes_of", "parse_url", "url_mistake", "wait_for_broker"]

logger = logging.getLogger("reliable.rabbitmq")

#: Seconds between two probes of an unreachable broker at worker boot; the last is repeated.
BACKOFF: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)
#: Seconds one probe of one node may take (socket, handshake), so that a silent network is an outage too.
PROBE_TIMEOUT = 10.0
_POLL = 0.1


def nodes_of(broker: Any) -> list[Any]:
    """A Dramatiq RabbitmqBroker's pika connection parameters, as a list (one per node)."""
    params = broker.parameters
    return list(params) if isinstance(params, (list, tuple)) else [params]


def node_addresses(nodes: Sequence[Any]) -> str:
    """The nodes as `host:port`, comma-separated (what an operator checks)."""
    return ", ".join(f"{params.host}:{params.port}" for params in nodes)


def describe_failure(exc: BaseException) -> str:
    """`exc` as one line: its class and message (or, when its message is empty, its arguments'), redacted."""
    message = str(exc).strip()
    if not message and exc.args:
        message = "; ".join(_describe_arg(arg) for arg in exc.args)
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return redact_secrets(" ".join(text.split()))


def explain(exc: BaseException, nodes: Sequence[Any]) -> str:
    """Why a connection to `nodes` or a query on it failed, as one line: the mistake and its fix
    (`misconfiguration`), or the nodes' host:port and the cause."""
    return misconfiguration(exc, nodes) or f"RabbitMQ at {node_addresses(nodes)}: {describe_failure(exc)}"


def _describe_arg(arg: object) -> str:
    # pika wraps the socket's error in its own (AMQPConnectorSocketConnectError: ConnectionRefusedError(...)),
    # and a cluster's failures in AMQPConnectionWorkflowFailed, whose `exceptions` name each node's.
    if isinstance(arg, BaseException):
        causes = getattr(arg, "exceptions", None)
        if causes:
            return "; ".join(_describe_arg(cause) for cause in causes)
        return repr(arg) if not str(arg).strip() else f"{type(arg).__name__}: {arg}"
    return str(arg)


def misconfiguration(exc: BaseException, nodes: Sequence[Any]) -> str | None:
    """One line naming the mistake and its fix if `exc` (a failed connection to `nodes`) cannot pass by
    waiting; None for an outage."""
    import pika.exceptions

    where = f"RabbitMQ at {node_addresses(nodes)}"
    vhosts = sorted({params.virtual_host for params in nodes})
    users = sorted({params.credentials.username for params in nodes if hasattr(params.credentials, "username")})
    if isinstance(exc, (pika.exceptions.ProbableAuthenticationError, pika.exceptions.AuthenticationError)):
        return (f"{where} refused the login of user {', '.join(map(repr, users))} ({describe_failure(exc)}): "
                "check the user and password in the broker URL (or create the user: rabbitmqctl add_user)")
    if isinstance(exc, pika.exceptions.ProbableAccessDeniedError):
        return (f"{where} refused virtual host {', '.join(map(repr, vhosts))} to user {', '.join(map(repr, users))} "
                f"({describe_failure(exc)}): fix the vhost in the broker URL (its path; '/' is %2F), or create it "
                "and grant the user access (rabbitmqctl add_vhost, set_permissions)")
    if isinstance(exc, ssl.SSLError):
        return (f"{where}: the TLS handshake failed ({describe_failure(exc)}): amqps:// needs RabbitMQ's TLS listener "
                "(usually port 5671) and a certificate the client trusts; use amqp:// for a plain port")
    return None


#: What a broker URL pika refuses is told to become.
URL_FIX = "write amqp://user:password@host:5672/vhost (amqps:// with TLS; several nodes ';'-separated)"


def url_mistake(exc: BaseException) -> str | None:
    """One line naming the mistake and its fix if `exc` is pika refusing a broker URL it cannot parse
    (a ValueError raised in pika's URL parsing: an unsupported scheme, a port that is not a number...),
    else None."""
    import traceback

    if not isinstance(exc, ValueError) or exc.__traceback__ is None:
        return None
    # pika's URLParameters (pika/connection.py), or urllib below it (a port that is not a number)
    if not any(frame.filename.replace("\\", "/").endswith("pika/connection.py")
               for frame in traceback.extract_tb(exc.__traceback__)):
        return None
    return f"unsupported RabbitMQ URL: {redact_secrets(str(exc))}: {URL_FIX}"


def parse_url(url: str) -> list[Any]:
    """pika's connection parameters of a broker URL (`;`-separated nodes); one it cannot parse is a
    BrokerConfigError naming the mistake and the fix (the URL is not echoed)."""
    import pika

    try:
        return [pika.URLParameters(part.strip()) for part in url.split(";") if part.strip()]
    except ValueError as exc:
        mistake = url_mistake(exc) or f"unsupported RabbitMQ URL: {describe_failure(exc)}: {URL_FIX}"
        raise BrokerConfigError(mistake) from None


def _probe(nodes: Sequence[Any]) -> None:
    """Open and close one connection to the first node that answers (each tried once, bounded)."""
    import pika

    bounded = [copy.copy(params) for params in nodes]  # the broker's own parameters keep their settings
    for params in bounded:
        params.connection_attempts = 1
        params.socket_timeout = PROBE_TIMEOUT
        params.stack_timeout = PROBE_TIMEOUT
    connection = pika.BlockingConnection(bounded)
    connection.close()


class _StopWatch:
    """While installed (main thread only), a TERM is remembered and handed to the handler it replaced."""

    def __init__(self) -> None:
        self.stopped = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> _StopWatch:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_term)
            self._installed = True
        return self

    def _on_term(self, signum: int, frame: Any) -> None:
        self.stopped = True  # a plain attribute: the main thread polls it
        if callable(self._previous):
            self._previous(signum, frame)

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, signal.SIG_DFL if self._previous is None else self._previous)


def wait_for_broker(nodes: Sequence[Any], *, probe: Callable[[Sequence[Any]], None] = _probe,
                    backoff: Sequence[float] = BACKOFF) -> None:
    """Return once RabbitMQ answers a connection; raise BrokerConfigError for a misconfiguration,
    BrokerUnreachable when a TERM arrives while waiting (see the module doc)."""
    failures = 0
    with _StopWatch() as watch:
        while True:
            try:
                probe(nodes)
            except Exception as exc:  # pika's errors, its connector's, the socket's: all causes are named
                mistake = misconfiguration(exc, nodes)
                if mistake is not None:
                    raise BrokerConfigError(mistake) from None
                delay = backoff[min(failures, len(backoff) - 1)]
                failures += 1
                logger.warning("RabbitMQ at %s cannot be reached (%s): waiting for it, next try in %gs "
                               "(attempt %d); nothing is consumed until it answers",
                               node_addresses(nodes), describe_failure(exc), delay, failures)
                deadline = time.monotonic() + delay
                while time.monotonic() < deadline:
                    if watch.stopped:
                        raise BrokerUnreachable(f"RabbitMQ at {node_addresses(nodes)} never answered; stop "
                                                "requested while waiting for it") from None
                    time.sleep(_POLL)
                continue
            if failures:
                logger.info("RabbitMQ at %s answers after %d failed attempt(s)", node_addresses(nodes), failures)
            return
