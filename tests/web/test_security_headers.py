"""Every response of the API and console carries the framing, sniffing and content-security headers
(issue 38), whatever answered it: a page, JSON, a redirect to sign in, a refusal, a static file.

The routes are enumerated from the app, so a route added later is covered without a row here; each
is asked by an anonymous caller (a 401 or a redirect) and with an admin's token, with its path
parameters filled in (an unknown id: a 404 page is an answer too).
"""

from __future__ import annotations

import re

from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from reliable.store import StateStore
from reliable.web import WebConfig, create_app
from reliable.web.headers import CONTENT_SECURITY_POLICY, SECURITY_HEADERS

from web_support import Tokens, bearer, session

_PARAM = re.compile(r"\{[^}]+\}")


def assert_protected(response: object, what: str) -> None:
    headers = response.headers  # type: ignore[attr-defined]
    for name, value in SECURITY_HEADERS.items():
        assert headers.get(name) == value, f"{what}: {name} is {headers.get(name)!r}"
    assert len(headers.get_list("content-security-policy")) == 1, what


def test_the_policy_keeps_pages_out_of_frames_and_loads_only_the_consoles_own_files() -> None:
    directives = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["frame-ancestors"] == "'none'" and directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'" and directives["style-src"] == "'self'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY
    assert SECURITY_HEADERS["X-Frame-Options"] == "DENY" and SECURITY_HEADERS["X-Content-Type-Options"] == "nosniff"


def test_every_route_answers_with_the_headers(store: StateStore, tokens: Tokens) -> None:
    app = create_app(store, config=WebConfig(secret_key="s"))
    asked = 0
    with TestClient(app) as client:
        for route in app.routes:
            if isinstance(route, Mount):
                path, methods = f"{route.path}/console.css", {"GET"}
            else:
                assert isinstance(route, Route), route
                path, methods = _PARAM.sub("nosuchthing", route.path), (route.methods or {"GET"}) - {"HEAD"}
            for method in sorted(methods):
                for headers in ({}, bearer(tokens.admin)):
                    response = client.request(method, path, headers=headers, json={} if method == "POST" else None,
                                              follow_redirects=False)
                    assert_protected(response, f"{method} {path} ({response.status_code})")
                    asked += 1
        assert asked > 60
        assert_protected(client.get("/no/such/page"), "an unknown path")
        assert_protected(client.post("/api/v1/operations", headers=bearer(tokens.admin),
                                     content=b"x" * (2 << 20)), "a body over the limit")


def test_a_signed_in_consoles_pages_carry_them(store: StateStore, tokens: Tokens) -> None:
    client, csrf = session(store, tokens.admin)
    for path in ("/", "/jobs", "/dlq", "/review", "/operations", "/workers", "/alerts", "/queues", "/workflows",
                 "/schedules", "/docs", "/overview/live"):
        response = client.get(path)
        assert response.status_code == 200, path
        assert_protected(response, path)
    signed_out = client.post("/logout", data={"csrf_token": csrf}, follow_redirects=False)
    assert_protected(signed_out, "POST /logout")


def test_a_server_error_carries_them_too(store: StateStore) -> None:
    """Starlette's ServerErrorMiddleware sends a 500 past every user middleware: the headers wrap it too."""
    app = create_app(store, config=WebConfig(secret_key="s"))

    async def broken(request: object) -> None:
        raise RuntimeError("boom")

    app.router.routes.append(Route("/broken", broken))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/broken")
        assert response.status_code == 500
        assert_protected(response, "a 500")
