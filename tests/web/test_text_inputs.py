"""Every text input of the API is checked before it reaches the store (issue 30 item 5), on both
databases: a NUL (or another control character) in any query parameter, path parameter or JSON
field of any route is a 400 naming it, never a store error. The routes and their parameters are
enumerated from the OpenAPI document (tests/web/test_api_openapi.py keeps it equal to the routes).

A command's `reason` is checked by `Control`, which audits the refusal: a viewer's command with a
NUL in its reason is refused and leaves a `command_refused` event, the reason escaped. A store
error never shows the store's URL, user, host or database to a client.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import pytest
from starlette.testclient import TestClient

from reliable.store import NewJob, StateStore
from reliable.web import WebConfig, create_app
from reliable.web.openapi import document

from web_support import Tokens, bearer, session

NUL = "a\x00b"
JOB = "job-1"


def _schema(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return doc["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema


def text_inputs() -> list[tuple[str, str, str, str]]:
    """(method, path, where, name) of every string parameter and string body field of every API route."""
    doc = document()
    found = []
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            for param in operation.get("parameters", []):
                kind = param["schema"].get("type")
                if kind in ("string", "array") or param["in"] == "path":
                    found.append((method, path, param["in"], param["name"]))
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            for name, field in _schema(doc, body.get("schema", {})).get("properties", {}).items():
                if field.get("type") in ("string", "object"):
                    found.append((method, path, "body", name))
    return found


INPUTS = text_inputs()


def test_the_enumeration_covers_every_kind_of_input() -> None:
    wheres = {where for _, _, where, _ in INPUTS}
    assert wheres == {"query", "path", "body"} and len(INPUTS) > 60


def request_with_nul(client: TestClient, token: str, method: str, path: str, where: str,
                     name: str) -> Any:
    url = path.replace("{job_id}", JOB).replace("{operation_id}", "op1")
    params: dict[str, str] = {}
    body: dict[str, Any] = {"reason": "why"} if method == "post" else {}
    if path.endswith(("/reconcile", "/resolve")):
        body["resolution"] = "succeeded"
    if path.endswith("/concurrency"):  # issue 42: an actor's concurrency limit
        body["concurrency"] = 1
    if path == "/api/v1/operations" and method == "post":
        body.update({"command": "pause", "filter": {"queue": "billing"}})
    if where == "path":
        url = path.replace("{" + name + "}", quote(NUL, safe="")).replace("{job_id}", JOB)
    elif where == "query":
        params[name] = NUL
    else:
        body[name] = {"queue": NUL} if name in ("filter", "options") else NUL
    kwargs: dict[str, Any] = {"params": params, "headers": bearer(token)}
    if method == "post":
        kwargs["json"] = body
    return client.request(method.upper(), url, **kwargs)


@pytest.mark.parametrize(("method", "path", "where", "name"), INPUTS,
                         ids=[f"{m} {p} {w}:{n}" for m, p, w, n in INPUTS])
def test_a_nul_in_any_text_input_is_a_400_naming_it(store: StateStore, tokens: Tokens, client: TestClient,
                                                    method: str, path: str, where: str, name: str) -> None:
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    response = request_with_nul(client, tokens.admin, method, path, where, name)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert name in error["message"] and "U+0000" in error["message"], error
    assert "postgres" not in response.text.lower() and "sqlite" not in response.text.lower()


def test_a_viewers_refused_command_is_audited_whatever_its_reason_holds(
        store: StateStore, tokens: Tokens, client: TestClient) -> None:
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    response = client.post(f"/api/v1/jobs/{JOB}/cancel", json={"reason": "x\x00y\x1b"}, headers=bearer(tokens.viewer))
    assert response.status_code == 400
    assert "reason" in response.json()["error"]["message"]
    refused = [e for e in store.events(JOB) if e.event == "command_refused"]
    assert len(refused) == 1 and refused[0].reason == "x\\x00y\\x1b" and refused[0].operator == "vera"
    assert store.get(JOB).status.value == "PENDING"


def test_the_console_refuses_control_characters_too(store: StateStore, tokens: Tokens) -> None:
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    client, csrf = session(store, tokens.admin)
    assert client.get("/jobs", params={"queue": NUL}).status_code == 400
    assert client.get("/jobs/" + quote(NUL, safe="")).status_code == 400
    refused = client.post(f"/jobs/{JOB}/actions/pause", data={"reason": NUL, "csrf_token": csrf},
                          follow_redirects=False)
    assert refused.status_code in (303, 400)
    assert [e.reason for e in store.events(JOB) if e.event == "command_refused"] == ["a\\x00b"]
    bulk = client.post("/bulk", data={"command": "pause", "reason": "ok", "queue": NUL, "csrf_token": csrf})
    assert bulk.status_code == 400 and "queue" in bulk.text
    signed_in = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    login = re.search(r'name="csrf_token" value="([^"]+)"', signed_in.get("/login").text)
    assert login is not None
    assert signed_in.post("/login", data={"token": NUL, "csrf_token": login.group(1)}).status_code == 401


def test_a_store_error_never_shows_the_store_url(pg_database: str) -> None:
    """A database that does not exist: the client learns it was a store error, not where the store is."""
    missing = pg_database.rsplit("/", 1)[0] + "/reliable_no_such_database"
    client = TestClient(create_app(StateStore(missing), config=WebConfig(secret_key="s")))
    response = client.get("/api/v1/jobs", headers=bearer("rel_abc_def"))
    assert response.status_code == 503, response.text
    text = response.text.lower()
    assert "reliable_no_such_database" not in text and "127.0.0.1" not in text and "postgres" not in text
