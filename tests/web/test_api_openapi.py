"""The OpenAPI document: it validates, describes every API route the app serves (and serves nothing it does
not describe), and the API's real answers match its schemas."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from openapi_spec_validator import validate
from starlette.applications import Starlette
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.schema import alerts
from reliable.web import WebConfig, create_app
from reliable.web.api import COMMANDS, FILTER_PARAMS
from reliable.web.openapi import document

from web_support import Tokens, bearer

METHODS = ("get", "post", "put", "patch", "delete")


def concrete(path: str) -> str:
    """A documented path with each {parameter} filled in."""
    return re.sub(r"\{[^}]+\}", "abcdef123", path)


def api_routes(app: Starlette) -> list[Route]:
    return [r for r in app.routes if isinstance(r, Route) and r.path.startswith("/api/")]


def test_the_document_validates() -> None:
    validate(document())  # type: ignore[arg-type]
    json.dumps(document())


def test_every_api_route_is_documented_and_every_documented_path_is_served(store: StateStore) -> None:
    app = create_app(store, config=WebConfig(secret_key="s"))
    paths = document()["paths"]
    routes = api_routes(app)
    assert routes
    for route in routes:
        for method in sorted((route.methods or set()) - {"HEAD"}):
            documented = [p for p, ops in paths.items()
                          if method.lower() in ops and route.path_regex.match(concrete(p))]
            assert documented, f"{method} {route.path} is not in the OpenAPI document"
    has_operations = any(r.path.startswith("/api/v1/operations") for r in routes)
    for path, operations in paths.items():
        if path.startswith("/api/v1/operations") and not has_operations:
            continue  # the bulk operations' routes are not in this build yet
        for method in (m for m in METHODS if m in operations):
            served = [r for r in routes if method.upper() in (r.methods or set())
                      and r.path_regex.match(concrete(path))]
            assert served, f"{method.upper()} {path} is documented but not served"


def test_the_document_is_served_authenticated_under_the_apps_mount_path(store: StateStore,
                                                                        tokens: Tokens) -> None:
    outer = Starlette(routes=[Mount("/reliable", app=create_app(store, config=WebConfig(secret_key="s")))])
    with TestClient(outer) as client:
        assert client.get("/reliable/api/v1/openapi.json").status_code == 401
        served = client.get("/reliable/api/v1/openapi.json", headers=bearer(tokens.viewer)).json()
    assert served["servers"] == [{"url": "/reliable"}]
    assert served["paths"] == document()["paths"]


def conforms(doc: dict[str, Any], schema: str, value: Any) -> None:
    """Validate `value` against components/schemas/`schema` of `doc` (JSON Schema 2020-12)."""
    root = {"$ref": f"#/components/schemas/{schema}", "components": doc["components"]}
    jsonschema.Draft202012Validator(root).validate(value)


def test_real_answers_match_the_documents_schemas(client: TestClient, store: StateStore, tokens: Tokens) -> None:
    store.register(NewJob("job-pending", "billing", "charge", {"args": [], "kwargs": {"password": "x"},
                                                               "options": {}}, owner="team-pay"))
    store.register(NewJob("job-dead", "exports", "export", {"args": [1], "kwargs": {}, "options": {}}))
    claim = store.claim("job-dead", worker_id="w1", lease_ttl=60)
    store.save_checkpoint("job-dead", claim.lease_id, {"page": 2}, lease_ttl=60)
    store.finish("job-dead", claim.lease_id, Event.DEAD_LETTER, worker_id="w1",
                 error=ErrorInfo("permanent", "ValueError", "bad"))
    with store.write() as conn:
        conn.execute(alerts.insert().values(fingerprint="fp", alertname="JobStuck", labels='{"queue": "billing"}',
                                            annotations="{}", state="firing", starts_at=store.now()))
    doc = document()
    headers = bearer(tokens.viewer)
    for path, schema in (("/api/v1/whoami", "Principal"), ("/api/v1/jobs", "JobPage"), ("/api/v1/dlq", "JobPage"),
                         ("/api/v1/review", "JobPage"), ("/api/v1/jobs/job-dead", "JobDetail"),
                         ("/api/v1/jobs/job-dead/events", "EventList"), ("/api/v1/queues", "QueueList"),
                         ("/api/v1/overview", "Overview"), ("/api/v1/alerts", "AlertList"),
                         ("/api/v1/jobs/nosuchjob", "Error"), ("/api/v1/jobs?limit=0", "Error")):
        response = client.get(path, headers=headers)
        assert response.status_code in (200, 400, 404), path
        conforms(doc, schema, response.json())
    for token, job_id, command, body in ((tokens.admin, "job-dead", "retry", {"reason": "r"}),
                                         (tokens.viewer, "job-pending", "pause", {"reason": "r"})):
        response = client.post(f"/api/v1/jobs/{job_id}/{command}", json=body, headers=bearer(token))
        conforms(doc, "CommandResult" if response.status_code == 200 else "Error", response.json())
    bad_body = {"reason": "r", "operator": "mallory"}
    with pytest.raises(jsonschema.ValidationError):
        conforms(doc, "CommandRequest", bad_body)
    conforms(doc, "ReconcileRequest", {"reason": "r", "resolution": "succeeded"})


def test_documented_parameters_and_commands_are_those_the_handlers_take() -> None:
    paths = document()["paths"]

    def names(path: str) -> set[str]:
        return {p["name"] for p in paths[path]["get"]["parameters"]}

    assert names("/api/v1/jobs") == set(FILTER_PARAMS)
    assert names("/api/v1/dlq") == set(FILTER_PARAMS) - {"state"} | {"include_discarded"}
    assert names("/api/v1/review") == set(FILTER_PARAMS) - {"state"}
    assert names("/api/v1/jobs/{job_id}/events") == {"job_id", "event", "since", "limit", "before"}
    assert names("/api/v1/jobs/{job_id}") == {"job_id", "event", "since", "event_limit", "before"}
    documented = {p.rsplit("/", 1)[1] for p in paths if p.startswith("/api/v1/jobs/{job_id}/")} - {"events", "message"}
    assert documented == set(COMMANDS)
    filter_keys = set(document()["components"]["schemas"]["OperationRequest"]["properties"]["filter"]["properties"])
    assert filter_keys == set(FILTER_PARAMS) - {"limit", "cursor"} | {"exclude_discarded"}  # the DLQ's, bulk only
