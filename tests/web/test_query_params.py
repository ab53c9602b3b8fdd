"""One rule per query parameter (issue 42): every GET route of the app, API and console, is listed below
with the shared parameters it reads (`reliable.web.inputs.QUERY_PARSERS`: before, window, limit,
event_limit, exited, cursor), and each is parsed by the web layer's one function for it. A route added
without a row fails `test_every_get_route_is_listed`; a listed parameter given a bad value, or given
twice, is a 400 naming it on the API (JSON) and on the console (its error page) alike, on SQLite and
PostgreSQL. Measured before: `/jobs/{id}?before=zero` was ignored by the console page while the API
answered 400; `?window=` was checked in two places, `?limit=` in five.

`test_no_module_reads_a_shared_parameter_itself` walks reliable/web for a bypass: a module other than
inputs.py reading one of those parameters from `request.query_params` directly.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from starlette.routing import Route
from starlette.testclient import TestClient

import reliable.web
from reliable.store import NewJob, StateStore
from reliable.store.job_stats import WINDOWS
from reliable.web import WebConfig, create_app
from reliable.web.console import CHART_WINDOWS
from reliable.web.inputs import QUERY_PARSERS

from web_support import Tokens, bearer, session

JOB = "job-1"
#: Every GET route by name: (a path to request, the shared query parameters it reads).
ROUTES: dict[str, tuple[str, tuple[str, ...]]] = {
    "api_whoami": ("/api/v1/whoami", ()),
    "api_list_jobs": ("/api/v1/jobs", ("limit", "cursor")),
    "api_job": (f"/api/v1/jobs/{JOB}", ("event_limit", "before")),
    "api_job_events": (f"/api/v1/jobs/{JOB}/events", ("limit", "before")),
    "api_job_message": (f"/api/v1/jobs/{JOB}/message", ()),
    "api_dead_letters": ("/api/v1/dlq", ("limit", "cursor")),
    "api_review": ("/api/v1/review", ("limit", "cursor")),
    "api_overview_figures": ("/api/v1/overview", ("window",)),
    "api_alert_list": ("/api/v1/alerts", ("limit", "cursor")),
    "api_openapi_document": ("/api/v1/openapi.json", ()),
    "api_recent": ("/api/v1/operations", ("limit",)),
    "api_detail": ("/api/v1/operations/op-1", ()),
    "api_workflows": ("/api/v1/workflows", ("limit",)),
    "api_workflow": ("/api/v1/workflows/wf-1", ()),
    "api_schedules": ("/api/v1/schedules", ()),
    "api_schedule": ("/api/v1/schedules/nightly", ("limit",)),
    "api_workers": ("/api/v1/workers", ("limit", "cursor", "exited")),
    "api_queues": ("/api/v1/queues", ("limit", "cursor")),
    "api_limits": ("/api/v1/limits", ("limit", "cursor")),
    "overview": ("/", ("window",)),
    "overview_live": ("/overview/live", ("window",)),
    "jobs": ("/jobs", ("limit", "cursor")),
    "dlq": ("/dlq", ("limit", "cursor")),
    "review": ("/review", ("limit", "cursor")),
    "job": (f"/jobs/{JOB}", ("before",)),
    "job_status": (f"/jobs/{JOB}/status", ()),
    "job_message": (f"/jobs/{JOB}/message", ()),
    "sign_in": ("/login", ()),
    "operations": ("/operations", ()),
    "operation": ("/operations/op-1", ()),
    "docs": ("/docs", ()),
    "doc_image": ("/docs/images/x.png", ()),
    "doc": ("/docs/console", ()),
    "workflows": ("/workflows", ()),
    "workflow": ("/workflows/wf-1", ()),
    "schedules": ("/schedules", ()),
    "schedule": ("/schedules/nightly", ()),
    "workers": ("/workers", ("limit", "cursor", "exited")),
    "alerts": ("/alerts", ("limit", "cursor")),
    "alert_runbook": ("/alerts/reliabledeadlettergrowth", ()),
    "queues": ("/queues", ("limit", "cursor")),
    "queue_actions": ("/queues/billing/actions", ()),
}
#: A value each parser refuses (a cursor's content is its listing's to judge: only "given twice" is shared).
BAD = {"before": "zero", "window": "2h", "limit": "0", "event_limit": "-1", "exited": "x"}
#: Integers past int()'s 4,300 digits (its refusal is no 400 of its own).
HUGE = {"before": "9" * 5000, "limit": "9" * 5000, "event_limit": "9" * 5000}
CASES = [(name, param) for name, (_, params) in ROUTES.items() for param in params]


def test_every_get_route_is_listed() -> None:
    served = {route.name for route in create_app("sqlite:///unused.db").routes
              if isinstance(route, Route) and "GET" in (route.methods or ())}
    assert served == set(ROUTES), f"unlisted: {sorted(served - set(ROUTES))}, gone: {sorted(set(ROUTES) - served)}"
    assert {p for _, params in ROUTES.values() for p in params} == set(QUERY_PARSERS)
    assert set(CHART_WINDOWS) == set(WINDOWS)  # the console names every window the parser accepts


@pytest.fixture
def seeded(store: StateStore) -> StateStore:
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    return store


@pytest.mark.parametrize(("name", "param"), CASES, ids=[f"{n}?{p}" for n, p in CASES])
def test_a_bad_or_repeated_value_is_a_400_naming_the_parameter(seeded: StateStore, tokens: Tokens, name: str,
                                                               param: str) -> None:
    path, _ = ROUTES[name]
    api = path.startswith("/api/")
    client, _ = (TestClient(create_app(seeded, config=WebConfig(secret_key="s"))), "") if api else \
        session(seeded, tokens.admin)
    headers = bearer(tokens.admin) if api else {}
    tries = [[(param, "1"), (param, "2")]] + [[(param, table[param])] for table in (BAD, HUGE) if param in table]
    with client:
        for query in tries:
            answer = client.get(path, params=query, headers=headers)
            assert answer.status_code == 400, f"{path}?{query}: {answer.status_code}"
            text = answer.json()["error"]["message"] if api else answer.text
            assert re.search(rf"parameter (&#39;|'){param}(&#39;|')", text), text[-2000:]


_READ = re.compile(r"""(?<!\w)query_params(?:\.get|\.getlist)?\s*[(\[]\s*["'](\w+)["']""")


def test_no_module_reads_a_shared_parameter_itself() -> None:
    web = Path(reliable.web.__file__).parent
    found = [(path.name, m.group(1)) for path in sorted(web.glob("*.py")) if path.name != "inputs.py"
             for m in _READ.finditer(path.read_text()) if m.group(1) in QUERY_PARSERS]
    assert found == []
    assert _READ.search('request.query_params.get("limit", "50")')  # the checker sees the old way
