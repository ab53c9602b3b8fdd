"""The console mounted under a path prefix: in a parent Starlette (ASGI) app, and in a WSGI site
through `reliable.web.wsgi_app` (the dispatcher docs/console.md shows for Django and Flask)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from reliable.states import JobStatus
from reliable.store import NewJob, StateStore
from reliable.web import WebConfig, create_app, wsgi_app

from web_support import Tokens

JOB = "0123456789-mounted-job"
_URL_ATTRIBUTES = re.compile(r'(?:href|src|action|data-poll)="([^"]*)"')


def urls_in(page: str) -> list[str]:
    """Every URL a page links to, posts to, loads or polls."""
    return [url.replace("&amp;", "&") for url in _URL_ATTRIBUTES.findall(page)]


def assert_all_under(page: str, prefix: str) -> None:
    """Every URL of `page` stays under `prefix` (no hard-coded root path)."""
    outside = [url for url in urls_in(page) if not (url.startswith(prefix) or url.startswith("#"))]
    assert not outside, f"URLs outside {prefix}: {outside}"


def sign_in(get: Callable[..., Any], post: Callable[..., Any], base: str, token: str, next_path: str) -> Any:
    """Sign in through the console's form at `base`; the redirect response."""
    login = get(f"{base}/login?next={next_path}")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', login.text)
    assert csrf is not None
    return post(f"{base}/login?next={next_path}", data={"token": token, "csrf_token": csrf.group(1)},
                follow_redirects=False)


@pytest.fixture
def job(store: StateStore) -> str:
    store.register(NewJob(JOB, "billing", "invoice", {"args": [], "kwargs": {}, "options": {}}))
    return JOB


def test_mounted_in_a_starlette_app_links_static_files_and_redirects_keep_the_prefix(
        store: StateStore, tokens: Tokens, job: str) -> None:
    parent = Starlette(routes=[Route("/", lambda request: PlainTextResponse("the host app")),
                               Mount("/ops", app=create_app(store, config=WebConfig(secret_key="s")))])
    client = TestClient(parent)
    assert client.get("/").text == "the host app"
    first = client.get("/ops/jobs", follow_redirects=False)
    assert first.status_code == 303
    assert first.headers["location"] == "http://testserver/ops/login?next=/ops/jobs"
    login = client.get(first.headers["location"])
    assert_all_under(login.text, "http://testserver/ops/")
    css = client.get("/ops/static/console.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    assert client.get("/ops/static/console.js").status_code == 200
    signed_in = sign_in(client.get, client.post, "/ops", tokens.operator, "/ops/jobs")
    assert signed_in.headers["location"] == "/ops/jobs"
    for path in ("/ops/", "/ops/overview/live", "/ops/jobs", "/ops/dlq", "/ops/review", f"/ops/jobs/{job}"):
        page = client.get(path)
        assert page.status_code == 200, path
        assert_all_under(page.text, "http://testserver/ops/")
    csrf = re.search(r'<meta name="csrf-token" content="([^"]+)"', client.get("/ops/").text)
    assert csrf is not None
    done = client.post(f"/ops/jobs/{job}/actions/pause", data={"reason": "mounted", "csrf_token": csrf.group(1)},
                       follow_redirects=False)
    assert done.headers["location"] == f"http://testserver/ops/jobs/{job}"
    assert store.get(job).status is JobStatus.PAUSED
    assert client.get(f"/ops/jobs/{job[:8]}", follow_redirects=False).headers["location"] == (
        f"http://testserver/ops/jobs/{job}")
    out = client.post("/ops/logout", data={"csrf_token": csrf.group(1)}, follow_redirects=False)
    assert out.headers["location"] == "http://testserver/ops/login"


def prefix_dispatcher(prefix: str, console: Any, site: Any) -> Callable[[dict[str, Any], Any], Iterable[bytes]]:
    """The WSGI dispatcher of docs/console.md: requests under `prefix` go to the console, others to `site`."""

    def application(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == prefix or path.startswith(prefix + "/"):
            environ = {**environ, "SCRIPT_NAME": environ.get("SCRIPT_NAME", "") + prefix,
                       "PATH_INFO": path[len(prefix):] or "/"}
            return console(environ, start_response)  # type: ignore[no-any-return]
        return site(environ, start_response)  # type: ignore[no-any-return]

    return application


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log on the test's output."""


@pytest.fixture
def wsgi_site(store: StateStore) -> Iterator[str]:
    """A WSGI server (wsgiref) serving a host site with the console under /ops; its base URL."""

    def host_site(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"the host site"]

    console = wsgi_app(store, config=WebConfig(secret_key="s"))
    server = make_server("127.0.0.1", 0, prefix_dispatcher("/ops", console, host_site), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_through_wsgi_under_a_prefix(store: StateStore, tokens: Tokens, job: str, wsgi_site: str) -> None:
    with httpx.Client(base_url=wsgi_site, timeout=30) as http:
        assert http.get("/").text == "the host site"
        first = http.get("/ops/dlq")
        assert first.status_code == 303 and first.headers["location"] == f"{wsgi_site}/ops/login?next=/ops/dlq"
        assert http.get("/ops/static/console.css").status_code == 200
        assert sign_in(http.get, http.post, "/ops", tokens.admin, f"/ops/jobs/{job}").headers["location"] == (
            f"/ops/jobs/{job}")
        page = http.get(f"/ops/jobs/{job}")
        assert page.status_code == 200 and f"<code class=\"id\">{job}</code>" in page.text
        assert_all_under(page.text, f"{wsgi_site}/ops/")
        csrf = re.search(r'<meta name="csrf-token" content="([^"]+)"', page.text)
        assert csrf is not None
        done = http.post(f"/ops/jobs/{job}/actions/cancel", data={"reason": "wsgi", "csrf_token": csrf.group(1)})
        assert done.status_code == 303 and done.headers["location"] == f"{wsgi_site}/ops/jobs/{job}"
        assert "cancel: moved to CANCELLED." in http.get(done.headers["location"]).text
    assert store.get(job).status is JobStatus.CANCELLED
