"""Every page and API route x every role: a job's secrets leave only toward a caller who may act on it.

The table below names every GET route the app serves (API and console). A route added without a row
fails `test_every_route_has_a_rule`. Each row says whether the route shows job values, and for the
API and the CLI which records (job, event, attempt, effect) their JSON carries: every key of those
records must be a field `reliable.disclosure` declares a kind for, so a field added to the output
without a rule fails too. Roles: viewer, an operator outside its scope (otto acts on queue billing; the jobs
are on payments), admin, and anonymous. Only admin sees the secrets; anonymous sees nothing.

The jobs quote the secret the way the measured defect did (issue 25): an exception
`ValueError("charge declined password=...")` whose `fail` event carried the message unmasked in its
detail, and a checkpoint `{"api_token": ...}`. One job is written through the real failure path
(policy decision -> outcome -> store), one with the rows main wrote before the fix (raw detail).

`CLI_SURFACES` does the same for the `reliable` commands that print jobs: with the store's URL
(values as stored) and through a real API server with a viewer's and an admin's token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from click.testing import CliRunner
from control.cli_api_server import serve
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from reliable.cli.main import cli
from reliable.disclosure import ATTEMPT_FIELDS, EFFECT_FIELDS, EVENT_FIELDS, JOB_FIELDS, Kind
from reliable.policy import Failure, Policy
from reliable.redact import MASK
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.web import WebConfig, create_app
from reliable.worker.outcome import failed

from web_support import Tokens, bearer, session

SECRET = "hunter2-zz"
RAW = "payments-raw"  # the rows as main wrote them: detail.message in clear
LIVE = "payments-live"  # written through the policy and the outcome, as a worker does now
DEAD = "payments-dead"
REVIEW = "payments-review"
ROLES = ("viewer", "operator", "admin", "anonymous")
SEES_SECRETS = {"admin"}

Records = Callable[[Any], Iterator[tuple[Any, Mapping[str, Kind]]]]


def _each(key: str, fields: Mapping[str, Kind]) -> Records:
    return lambda body: ((row, fields) for row in body[key])


#: A job's detail adds `message_cut` ({bytes, limit}: the message's size when it is left out), no value of the job.
DETAIL_JOB_FIELDS: Mapping[str, Kind] = {**JOB_FIELDS, "message_cut": Kind.PUBLIC}


def _detail(body: Any) -> Iterator[tuple[Any, Mapping[str, Kind]]]:
    yield body["job"], DETAIL_JOB_FIELDS
    yield from ((row, EVENT_FIELDS) for row in body["events"])
    yield from ((row, ATTEMPT_FIELDS) for row in body["attempts"])
    yield from ((row, EFFECT_FIELDS) for row in body["effects"])


@dataclass(frozen=True)
class Surface:
    """One GET route: the path requested (None: covered elsewhere, see `why`) and what it shows."""

    path: str | None
    shows_job_values: bool
    records: Records | None = None  # the API's records and their declared fields
    why: str = ""


#: Every GET route of `create_app`, by its route path.
SURFACES: dict[str, Surface] = {
    "/api/v1/jobs": Surface("/api/v1/jobs", True, _each("jobs", JOB_FIELDS)),
    "/api/v1/jobs/{job_id}": Surface(f"/api/v1/jobs/{RAW}", True, _detail),
    "/api/v1/jobs/{job_id}/events": Surface(f"/api/v1/jobs/{RAW}/events", True, _each("events", EVENT_FIELDS)),
    "/api/v1/jobs/{job_id}/message": Surface(f"/api/v1/jobs/{RAW}/message", True),
    "/api/v1/dlq": Surface("/api/v1/dlq", True, _each("jobs", JOB_FIELDS)),
    "/api/v1/review": Surface("/api/v1/review", True, _each("jobs", JOB_FIELDS)),
    "/api/v1/queues": Surface("/api/v1/queues", False),
    "/api/v1/overview": Surface("/api/v1/overview", False),
    "/api/v1/alerts": Surface("/api/v1/alerts", False),
    "/api/v1/whoami": Surface("/api/v1/whoami", False),
    "/api/v1/openapi.json": Surface("/api/v1/openapi.json", False),
    "/api/v1/operations": Surface("/api/v1/operations", False),
    "/api/v1/operations/{operation_id}": Surface(None, False, why="an operation's filter text: "
                                                 "test_redaction_rules.py::test_an_operations_text_search_is_masked"),
    "/queues": Surface("/queues", False),  # issue 28 (c28-queues): figures and pauses, no job value
    "/queues/{queue}/actions": Surface("/queues/billing/actions", False),  # a queue's forms: figures, no job value
    "/": Surface("/", False),
    "/overview/live": Surface("/overview/live", False),
    "/jobs": Surface("/jobs", True),
    "/dlq": Surface("/dlq", True),
    "/review": Surface("/review", True),
    "/jobs/{job_id}": Surface(f"/jobs/{RAW}", True),
    "/jobs/{job_id}/status": Surface(f"/jobs/{RAW}/status", False),
    "/jobs/{job_id}/message": Surface(f"/jobs/{RAW}/message", True),
    "/operations": Surface("/operations", False),
    "/operations/{operation_id}": Surface(None, False, why="as /api/v1/operations/{operation_id}"),
    "/login": Surface("/login", False),
    "/docs": Surface("/docs", False),
    "/docs/{topic}": Surface("/docs/operations", False),
    "/docs/images/{name}": Surface("/docs/images/console-overview.png", False),  # the docs' pictures
    "/static": Surface(None, False, why="files shipped with the package: no data"),
    # c28-flows: workflows and schedules (their nodes' and slots' values: tests/web/test_api_flows.py)
    "/api/v1/workflows": Surface("/api/v1/workflows", False),
    "/api/v1/workflows/{workflow_id}": Surface(None, True, why="a node's arguments and error by role: "
                                               "test_api_flows.py::test_workflow_reads_commands_and_roles"),
    "/api/v1/schedules": Surface(None, True, why="a schedule's declared arguments by role: "
                                 "test_api_flows.py::test_schedule_reads_commands_and_roles"),
    "/api/v1/schedules/{name}": Surface(None, True, why="as /api/v1/schedules"),
    "/workflows": Surface("/workflows", False),
    "/workflows/{workflow_id}": Surface(None, True, why="test_api_flows.py::test_the_pages_draw_the_graph_and_run_"
                                        "the_commands"),
    "/schedules": Surface("/schedules", False),
    "/schedules/{name}": Surface(None, True, why="as /workflows/{workflow_id}"),
    # /c28-flows
    # -- c28-workers: the fleet and the alerts: no job values (ids, queues, actors, states) --
    "/api/v1/workers": Surface("/api/v1/workers", False),
    "/workers": Surface("/workers", False),
    "/api/v1/limits": Surface("/api/v1/limits", False),  # issue 42: actors' limits, names and numbers only
    "/alerts": Surface("/alerts", False),
    "/alerts/{alertname}": Surface("/alerts/reliabledeadlettergrowth", False),
    # -- end c28-workers --
}


def _get_routes(routes: list[Any]) -> Iterator[str]:
    for route in routes:
        if isinstance(route, Mount) or (isinstance(route, Route) and "GET" in (route.methods or ())):
            yield route.path


def test_every_route_has_a_rule(store: StateStore) -> None:
    served = set(_get_routes(create_app(store, config=WebConfig(secret_key="s")).routes))
    assert served == set(SURFACES), (f"routes without a disclosure rule: {sorted(served - set(SURFACES))}; "
                                     f"rules for no route: {sorted(set(SURFACES) - served)}")


def _started(store: StateStore, job_id: str) -> tuple[int, str | None]:
    store.register(NewJob(job_id, "payments", "charge", {"args": [f"password={SECRET}"],
                                                          "kwargs": {"password": SECRET, "amount": 12}, "options": {}}))
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    store.save_checkpoint(job_id, claim.lease_id, {"api_token": SECRET, "page": 3}, lease_ttl=60)
    store.record_effect(job_id, claim.lease_id, "charge:1", attempt_id=claim.job.attempt_id, result={"token": SECRET})
    return claim.lease_id, claim.job.attempt_id


def seed(store: StateStore) -> None:
    """The four jobs, each quoting SECRET in its arguments, checkpoint, error, traceback and event detail."""
    message = f"charge declined password={SECRET}"
    traceback = f"Traceback (most recent call last):\nValueError: {message}\n"
    lease, _ = _started(store, RAW)
    store.finish(RAW, lease, Event.FAIL, worker_id="w1",
                 error=ErrorInfo("permanent", "ValueError", message, traceback=traceback),
                 detail={"action": "fail", "exception_type": "builtins.ValueError", "message": message})
    lease, _ = _started(store, LIVE)
    policy = Policy.load(None)
    decision = policy.decide(Failure(exception=ValueError(message), actor="charge", queue="payments", attempt=1,
                                     retry_count=0, contract=policy.contract("charge", "payments"), now=0.0,
                                     throws=(ValueError,)))
    outcome = failed(decision, traceback=traceback, retries=1, max_attempts=1, home_queue="payments",
                     queue="payments")
    assert outcome.event is Event.FAIL
    store.finish(LIVE, lease, outcome.event, worker_id="w1", error=outcome.error, detail=outcome.detail)
    for job_id, event in ((DEAD, Event.DEAD_LETTER), (REVIEW, Event.NEED_REVIEW)):
        lease, _ = _started(store, job_id)
        store.finish(job_id, lease, event, worker_id="w1",
                     error=ErrorInfo("permanent", "ValueError", message, traceback=traceback),
                     detail={"message": message})


@pytest.fixture
def seeded(store: StateStore) -> StateStore:
    seed(store)
    return store


def _token(tokens: Tokens, role: str) -> str | None:
    return None if role == "anonymous" else getattr(tokens, role)


def _walk_records(body: Any, records: Records) -> int:
    count = 0
    for row, fields in records(body):
        assert set(row) <= set(fields), f"fields without a rule: {sorted(set(row) - set(fields))}"
        count += 1
    return count


@pytest.mark.parametrize("role", ROLES)
def test_the_api_discloses_by_role(seeded: StateStore, tokens: Tokens, role: str) -> None:
    token = _token(tokens, role)
    headers = bearer(token) if token else {}
    with TestClient(create_app(seeded, config=WebConfig(secret_key="s"))) as client:
        for route, surface in SURFACES.items():
            if surface.path is None or not route.startswith("/api/"):
                continue
            answer = client.get(surface.path, headers=headers)
            if role == "anonymous":
                assert answer.status_code == 401 and SECRET not in answer.text, (route, answer.text)
                continue
            assert answer.status_code == 200, (route, answer.text)
            shown = SECRET in answer.text
            assert shown == (surface.shows_job_values and role in SEES_SECRETS), (route, role, answer.text)
            if surface.shows_job_values and role not in SEES_SECRETS:
                assert MASK in answer.text, route
            if surface.records is not None:
                assert _walk_records(answer.json(), surface.records) > 0, route


@pytest.mark.parametrize("role", ROLES)
def test_the_console_discloses_by_role(seeded: StateStore, tokens: Tokens, role: str) -> None:
    token = _token(tokens, role)
    if token is None:
        client = TestClient(create_app(seeded, config=WebConfig(secret_key="s")))
    else:
        client, _ = session(seeded, token)
    with client:
        for route, surface in SURFACES.items():
            if surface.path is None or route.startswith("/api/"):
                continue
            answer = client.get(surface.path, follow_redirects=False)
            assert SECRET not in answer.text or (surface.shows_job_values and role in SEES_SECRETS), (route, role)
            if role == "anonymous":
                assert answer.status_code in (200, 303) if route == "/login" else answer.status_code == 303, route
            elif surface.shows_job_values and role in SEES_SECRETS:
                assert SECRET in answer.text, route


def test_the_measured_defect_the_fail_events_detail_message(seeded: StateStore, tokens: Tokens) -> None:
    """Issue 25: a viewer saw `detail.message` in clear in the job, its events and the console's page."""
    with TestClient(create_app(seeded, config=WebConfig(secret_key="s"))) as client:
        for job_id in (RAW, LIVE):
            job = client.get(f"/api/v1/jobs/{job_id}", headers=bearer(tokens.viewer)).json()
            events = client.get(f"/api/v1/jobs/{job_id}/events", headers=bearer(tokens.viewer)).json()["events"]
            (fail,) = [e for e in job["events"] if e["event"] == "fail"]
            assert fail["detail"]["message"] == f"charge declined password={MASK}", fail
            assert [e["detail"] for e in events if e["event"] == "fail"] == [fail["detail"]]
            assert job["job"]["checkpoint"] == {"api_token": MASK, "page": 3}
        admin = client.get(f"/api/v1/jobs/{LIVE}", headers=bearer(tokens.admin)).json()
    # Written through the policy now, the message is masked for everyone, as last_error_message always was.
    (fail,) = [e for e in admin["events"] if e["event"] == "fail"]
    assert fail["detail"]["message"] == admin["job"]["last_error_message"] == f"charge declined password={MASK}"
    viewer, _ = session(seeded, tokens.viewer)
    page = viewer.get(f"/jobs/{RAW}").text
    assert SECRET not in page and "charge declined password=***" in page


#: The `reliable` commands that print jobs, and the records their --json carries.
CLI_SURFACES: dict[tuple[str, ...], Records] = {
    ("jobs", "list"): lambda body: ((row, JOB_FIELDS) for row in body),
    ("jobs", "show", RAW): lambda body: iter([(body["job"], JOB_FIELDS), (body["last_event"], EVENT_FIELDS),
                                              *((a, ATTEMPT_FIELDS) for a in body["attempts"])]),
    ("jobs", "events", RAW): lambda body: ((row, EVENT_FIELDS) for row in body),
    ("dlq", "list"): _each("jobs", JOB_FIELDS),
    ("dlq", "show", DEAD): lambda body: iter([(body["job"], JOB_FIELDS), *((e, EVENT_FIELDS) for e in body["events"]),
                                              *((a, ATTEMPT_FIELDS) for a in body["attempts"]),
                                              *((e, EFFECT_FIELDS) for e in body["effects"])]),
    ("review", "list"): _each("jobs", JOB_FIELDS),
    ("review", "show", REVIEW): lambda body: iter([(body["job"], JOB_FIELDS),
                                                   *((e, EVENT_FIELDS) for e in body["events"])]),
}


def _cli(*args: str, env: dict[str, str]) -> str:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RELIABLE_")}
    result = CliRunner().invoke(cli, [*args, "--json"], env={**clean, **env})
    assert result.exit_code == 0, (args, result.output)
    return result.stdout


def test_the_cli_shows_what_its_credentials_may_read(seeded: StateStore, store_url: str, tokens: Tokens) -> None:
    """With the store's URL a command could read every row: values as stored. With `--api` and a token:
    what the server disclosed to that token (a viewer's: masked)."""
    with serve(create_app(seeded, config=WebConfig(secret_key="s"))) as api_url:
        for args, records in CLI_SURFACES.items():
            stored = _cli(*args, "--store", store_url, env={})
            assert SECRET in stored, args
            assert _walk_records(json.loads(stored), records) > 0, args
            masked = _cli(*args, "--api", api_url, env={"RELIABLE_API_TOKEN": tokens.viewer})
            assert SECRET not in masked and MASK in masked, (args, masked)
            admin = _cli(*args, "--api", api_url, env={"RELIABLE_API_TOKEN": tokens.admin})
            assert SECRET in admin, args
