"""Every POST/PUT route, taken from the app's route table, against hostile bodies (reliable/web/bodies.py).

API routes: deep nesting, invalid UTF-8, a body that is not an object are the documented JSON 400;
a body over MAX_BODY_BYTES is a 413 (declared by Content-Length or streamed without one). Console
routes (forms): the same bodies never make a 5xx, and a declared oversize body is a 413.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

from reliable.store import NewJob, StateStore
from reliable.web import create_app
from reliable.web.bodies import MAX_BODY_BYTES, MAX_JSON_DEPTH

from web_support import Tokens, bearer, session

#: A value for each path parameter of a POST/PUT route (a route with a new parameter fails until added).
PATH_VALUES = {"job_id": "job-1", "command": "pause", "operation_id": "no-such-operation",
               "workflow_id": "no-such-workflow", "name": "no-such-schedule",  # c28-flows: the last two
               "queue": "billing",  # c28-queues: the queue routes
               "worker_id": "no-such-worker", "actor": "no_such_actor"}  # a process's commands, an actor's cap
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}

_DEEP_VALID = b'{"reason": ' + b'{"a": ' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1) + b"}"
#: name -> (body, the 400's message fragment)
BAD_JSON = {
    "deep (RecursionError)": (b'{"reason": ' + b"[" * 100_000, "nests deeper"),
    "deep, closed (RecursionError)": (b'{"reason": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "nests deeper"),
    f"deeper than {MAX_JSON_DEPTH}": (_DEEP_VALID, "nests deeper"),
    "invalid UTF-8": (b'{"reason": "caf\xe9"}', "not UTF-8"),
    "UTF-16": ('{"reason": "x"}'.encode("utf-16"), "not UTF-8"),
    "a list": (b"[1, 2]", "JSON object"),
    "a string": (b'"x"', "JSON object"),
    "null": (b"null", "JSON object"),
    "NaN": (b'{"reason": NaN}', "not JSON"),
    "not JSON": (b"reason=x", "not JSON"),
    "a huge integer": (b'{"rate": ' + b"9" * 5_000 + b"}", "not JSON"),
}
OVERSIZE = b'{"reason": "' + b"x" * MAX_BODY_BYTES + b'"}'


def _unsafe_routes(*, api: bool) -> list[tuple[str, str]]:
    """Every (method, path) of the app that takes a body, the path parameters filled in."""
    found = []
    for route in create_app("sqlite:///unused.db").routes:
        if isinstance(route, Route) and route.path.startswith("/api/") is api:
            for method in sorted((route.methods or set()) & UNSAFE):
                values = {name: PATH_VALUES[name] for name in route.param_convertors}
                if "/workers/" in route.path:  # a process's commands are quiet and stop
                    values["command"] = "quiet"
                found.append((method, route.path.format(**values)))
    return sorted(found)


API_ROUTES = _unsafe_routes(api=True)
CONSOLE_ROUTES = _unsafe_routes(api=False)


def test_the_routes_are_found() -> None:
    assert ("POST", "/api/v1/jobs/job-1/pause") in API_ROUTES and ("POST", "/api/v1/operations") in API_ROUTES
    assert ("POST", "/bulk") in CONSOLE_ROUTES and len(API_ROUTES) >= 4


@pytest.fixture(autouse=True)
def job(store: StateStore) -> None:
    """The job the routes name (job-1), PENDING."""
    store.register(NewJob("job-1", "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))


def _error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"} and body["error"]["status"] == response.status_code
    return body["error"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("method", "path"), API_ROUTES)
def test_every_api_body_failure_is_the_json_400(client: TestClient, tokens: Tokens, method: str, path: str) -> None:
    for name, (raw, fragment) in BAD_JSON.items():
        response = client.request(method, path, content=raw,
                                  headers={**bearer(tokens.admin), "content-type": "application/json"})
        assert response.status_code == 400, (name, response.text)
        error = _error(response)
        assert fragment in str(error["message"]) and error["type"] == "BadRequest", (name, error)


@pytest.mark.parametrize(("method", "path"), API_ROUTES)
def test_an_oversize_api_body_is_413_declared_or_streamed(client: TestClient, tokens: Tokens, method: str,
                                                          path: str) -> None:
    declared = client.request(method, path, content=OVERSIZE, headers=bearer(tokens.admin))
    assert declared.status_code == 413 and "larger than" in str(_error(declared)["message"])

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
        for start in range(0, len(OVERSIZE), 64 * 1024):
            yield OVERSIZE[start:start + 64 * 1024]

    streamed = client.request(method, path, content=chunks(), headers=bearer(tokens.admin))
    assert streamed.status_code == 413 and "larger than" in str(_error(streamed)["message"])


@pytest.mark.parametrize(("method", "path"), CONSOLE_ROUTES)
def test_console_routes_never_fail_on_a_body(store: StateStore, tokens: Tokens, method: str, path: str) -> None:
    client, csrf = session(store, tokens.admin)
    headers = {"X-CSRF-Token": csrf}
    for name, (raw, _fragment) in BAD_JSON.items():
        for kind in ("application/json", "application/x-www-form-urlencoded"):
            response = client.request(method, path, content=raw, headers={**headers, "content-type": kind},
                                      follow_redirects=False)
            assert response.status_code < 500, (name, kind, response.text[:300])
    form = client.request(method, path, content=b"reason=caf%E9&csrf_token=" + csrf.encode(),
                          headers={"content-type": "application/x-www-form-urlencoded"}, follow_redirects=False)
    assert form.status_code < 500, form.text[:300]
    client, csrf = session(store, tokens.admin)
    oversize = client.request(method, path, content=b"reason=" + b"x" * MAX_BODY_BYTES,
                              headers={"X-CSRF-Token": csrf, "content-type": "application/x-www-form-urlencoded"})
    assert oversize.status_code == 413 and "larger than" in oversize.text
