"""The metrics exporter: one HTTP process serving /metrics, /healthz and the runbooks.

``/metrics`` serves the store-derived gauges (`reliable.collector.StoreCollector`) and, from the
host's multiprocess directory (`reliable.multiprocess`), the worker processes' and supervisors'
counters and histograms added up across processes. ``/healthz`` answers 200 when the store answers a query
and 503 with the reason otherwise. ``/runbooks/<lower-case alert name>`` renders an alert's
runbook as an HTML page with the jobs it is about now (`reliable.alerts.pages`; ``.md`` after the
name: the Markdown as text): the default `runbook_base_url` of the alerts points here (unless a
console is configured); the jobs on those pages are shown masked (nobody authenticates here), their
ids linking to the console's job pages when its address is known.
It listens on 127.0.0.1 unless told otherwise. Run it with ``reliable exporter --port 9464 --store URL``.
"""

from __future__ import annotations

import html
import logging
import socketserver
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, quote
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server
from wsgiref.util import application_uri

from prometheus_client import CollectorRegistry, make_wsgi_app

from .collector import StoreCollector
from .multiprocess import Directories, HostCollector
from .states import JobStatus
from .store import StateStore

if TYPE_CHECKING:
    from .alerts.pages import RunbookPages

__all__ = ["DEFAULT_HOST", "PATHS", "WSGIApp", "build_registry", "make_app", "serve", "start_server"]

logger = logging.getLogger(__name__)

#: Where the exporter listens unless told otherwise (`--host`, RELIABLE_EXPORTER_HOST): this host only.
DEFAULT_HOST = "127.0.0.1"
#: What the exporter serves, and what of a job each path shows (docs/redaction.md): /metrics counts
#: jobs and names queues and actors, no job's values; /runbooks/ shows the affected jobs' error
#: messages and checkpoints disclosed to an anonymous reader (`reliable.disclosure`: secrets masked).
PATHS = ("/", "/healthz", "/metrics", "/runbooks/")

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def build_registry(store: StateStore, *, broker_url: str | None = None, sla: Mapping[str, float] | None = None,
                   states: Iterable[JobStatus | str] | None = None,
                   multiprocess_dir: Directories | None = None, queues: Iterable[str] = ()) -> CollectorRegistry:
    """A fresh registry with the store collector and, given a directory (or a function giving the
    directories at each scrape: `reliable.multiprocess.HostCollector`), the workers' metrics."""
    registry = CollectorRegistry()
    registry.register(StoreCollector(store, broker_url=broker_url, sla=sla, states=states, queues=queues))
    if multiprocess_dir:
        registry.register(HostCollector(multiprocess_dir))
    return registry


def _health(store: StateStore) -> tuple[str, bytes]:
    try:
        store.now()  # also checks that the schema is migrated
    except Exception as exc:  # any failure is the answer: unhealthy, with the reason
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return "503 Service Unavailable", f"unhealthy: {reason}\n".encode()
    return "200 OK", b"ok\n"


_TEXT = "text/plain; charset=utf-8"
_HTML = "text/html; charset=utf-8"


def _runbook(pages: RunbookPages, slug: str, query: str, served: str,
             console_url: str | None = None) -> tuple[str, bytes, str]:
    if not slug:
        return "200 OK", pages.index(base_url=pages.base_for(served)).encode(), _TEXT
    markdown = slug.endswith(".md")
    slug = slug.removesuffix(".md")
    try:
        text = pages.render(slug, dict(parse_qsl(query)), base_url=pages.base_for(served))
    except Exception as exc:  # the store may be down: say so rather than drop the connection
        # The details (SQL, parameters) go to the log, not to whoever can reach the port.
        logger.warning("runbook %r unavailable: %s: %s", slug, type(exc).__name__, exc)
        body = f"runbook unavailable ({type(exc).__name__}); see the exporter's log\n"
        return "503 Service Unavailable", body.encode(), _TEXT
    if text is None:
        return "404 Not Found", f"no runbook for {slug!r}; the list is at /runbooks/\n".encode(), _TEXT
    if markdown:
        # The runbook is rendered with HTML escaping (the console shows it as HTML); plain text needs none.
        return "200 OK", html.unescape(text).encode(), _TEXT
    from .alerts.runbook_html import runbook_page

    job_url = None
    if console_url:
        def job_url(job_id: str) -> str:
            return f"{console_url.rstrip('/')}/jobs/{quote(job_id, safe='')}"

    return "200 OK", runbook_page(slug, text, job_url=job_url).encode(), _HTML


def make_app(store: StateStore, registry: CollectorRegistry, runbooks: RunbookPages | None = None, *,
             console_url: str | None = None) -> WSGIApp:
    """The WSGI application: /metrics (Prometheus text or OpenMetrics), /healthz, /runbooks/ (given
    `runbooks`; job ids link to `console_url`'s job pages when given), 404 elsewhere."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics_app(environ, start_response)  # type: ignore[no-any-return]
        kind = _TEXT
        if path == "/healthz":
            status, body = _health(store)
        elif path.startswith("/runbooks/") and runbooks is not None:
            status, body, kind = _runbook(runbooks, path.removeprefix("/runbooks/").strip("/"),
                                          environ.get("QUERY_STRING", ""), f"{application_uri(environ)}runbooks/",
                                          console_url)
        elif path == "/":
            status, body = "200 OK", f"reliable exporter: {', '.join(PATHS[1:])}\n".encode()
        else:
            status, body = "404 Not Found", b"not found\n"
        # Runbooks show job data (error messages): every value escaped in the HTML page (runbook_html),
        # no script allowed to run, and never sniffed as another type.
        headers = [("Content-Type", kind), ("X-Content-Type-Options", "nosniff"), ("Content-Length", str(len(body)))]
        if kind == _HTML:
            headers.append(("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'"))
        start_response(status, headers)
        return [body]

    return app


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Prometheus scrapes every few seconds: no access log."""


def start_server(app: WSGIApp, *, host: str = DEFAULT_HOST, port: int = 9464) -> tuple[WSGIServer, threading.Thread]:
    """Serve `app` on host:port from a daemon thread; return the server (``.shutdown()``) and thread."""
    server = make_server(host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="reliable-exporter", daemon=True)
    thread.start()
    return server, thread


def serve(store: StateStore, *, host: str = DEFAULT_HOST, port: int = 9464, broker_url: str | None = None,
          sla: Mapping[str, float] | None = None, states: Iterable[JobStatus | str] | None = None,
          multiprocess_dir: Directories | None = None, ready: Callable[[str, int], None] | None = None,
          runbooks: RunbookPages | None = None, queues: Iterable[str] = (), console_url: str | None = None) -> None:
    """Serve /metrics, /healthz (and /runbooks/) until interrupted. `ready(host, port)` is called once
    listening."""
    registry = build_registry(store, broker_url=broker_url, sla=sla, states=states,
                              multiprocess_dir=multiprocess_dir, queues=queues)
    server = make_server(host, port, make_app(store, registry, runbooks, console_url=console_url),
                         server_class=_ThreadingServer,
                         handler_class=_QuietHandler)
    try:
        if ready is not None:
            ready(host, server.server_port)
        server.serve_forever()
    finally:
        server.server_close()
