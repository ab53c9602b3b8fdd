"""Any job id the rule allows (reliable.inputs) works in every job route and console link (issue 25
item 4, issue 30 item 3): `/ ? # %`, spaces, an id ending in `/events`, 255 characters, on both
databases, at the app's root and mounted under a prefix. No page fails because of one job's id.

`test_every_job_route_is_a_job_route` enumerates the app's routes: a new route naming {job_id}
without `JobRoute` fails it.
"""

from __future__ import annotations

import re

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from reliable.inputs import MAX_JOB_ID
from reliable.states import JobStatus
from reliable.store import NewJob, StateStore
from reliable.web import WebConfig, create_app
from reliable.web.paths import JobIdConvertor, JobRoute

from web_support import Tokens, bearer, csrf_of

WEIRD_IDS = ("invoice/2026/42", "a?b#c%2Fd e&f=g+h", "x/events", "z" * MAX_JOB_ID, "..", "é/№ 1")

#: Every route of the app that takes a job id, with a request to it (method, path after the id).
JOB_ROUTES = {"api_job": ("GET", ""), "api_job_events": ("GET", "/events"), "api_job_message": ("GET", "/message"),
              "api_command": ("POST", "/pause"), "job": ("GET", ""), "job_status": ("GET", "/status"),
              "job_message": ("GET", "/message"), "job_action": ("POST", "/actions/pause")}


def test_every_job_route_is_a_job_route(store: StateStore) -> None:
    app = create_app(store, config=WebConfig(secret_key="s"))
    named = {route.name: route for route in app.routes if "{job_id}" in getattr(route, "path", "")}
    assert set(named) == set(JOB_ROUTES)
    assert all(isinstance(route, JobRoute) for route in named.values())
    for name in JOB_ROUTES:  # the link builder encodes the id as one segment
        params = {"job_id": "a/b?c#d%e f"} | ({"command": "pause"} if name in ("api_command", "job_action") else {})
        assert "/a%2Fb%3Fc%23d%25e%20f" in str(app.url_path_for(name, **params))


def segment_of(job_id: str) -> str:
    return JobIdConvertor().to_string(job_id)


def make(store: StateStore, job_id: str) -> None:
    store.register(NewJob(job_id, "billing", "charge", {"args": [1], "kwargs": {}, "options": {}}))


def sign_in(client: TestClient, prefix: str, token: str) -> str:
    login = re.search(r'name="csrf_token" value="([^"]+)"', client.get(f"{prefix}/login").text)
    assert login is not None
    client.post(f"{prefix}/login", data={"token": token, "csrf_token": login.group(1)}, follow_redirects=False)
    return csrf_of(client.get(f"{prefix}/").text)


@pytest.mark.parametrize("prefix", ["", "/ops"])
def test_any_allowed_id_works_in_every_route_and_link(store: StateStore, tokens: Tokens, prefix: str) -> None:
    for job_id in WEIRD_IDS:
        make(store, job_id)
    make(store, "x")  # "x/events" must not be read as the events of "x"
    app = create_app(store, config=WebConfig(secret_key="s"))
    client = TestClient(Starlette(routes=[Mount(prefix, app=app)]) if prefix else app)
    for job_id in WEIRD_IDS:
        api = f"{prefix}/api/v1/jobs/{segment_of(job_id)}"
        detail = client.get(api, headers=bearer(tokens.admin))
        assert detail.status_code == 200 and detail.json()["job"]["job_id"] == job_id, (job_id, detail.text)
        assert client.get(f"{api}/events", headers=bearer(tokens.admin)).json()["job_id"] == job_id
        assert client.get(f"{api}/message", headers=bearer(tokens.admin)).json()["job_id"] == job_id
        paused = client.post(f"{api}/pause", json={"reason": "test"}, headers=bearer(tokens.admin))
        assert paused.status_code == 200, (job_id, paused.text)
        assert store.get(job_id).status is JobStatus.PAUSED
    assert store.get("x").status is JobStatus.PENDING
    csrf = sign_in(client, prefix, tokens.admin)
    listing = client.get(f"{prefix}/jobs")
    assert listing.status_code == 200
    links = set(re.findall(r'<a href="([^"]*/jobs/[^"]+)"><code>', listing.text))
    for job_id in WEIRD_IDS:
        link = next(link for link in links if link.endswith("/jobs/" + segment_of(job_id)))
        page = client.get(link)
        assert page.status_code == 200 and ("Paused" in page.text or "PAUSED" in page.text), job_id
        assert client.get(f"{link}/status").status_code == 200
        assert client.get(f"{link}/message").json()["args"] == [1]
        resumed = client.post(f"{link}/actions/resume", data={"reason": "test", "csrf_token": csrf},
                              follow_redirects=False)
        assert resumed.status_code == 303 and resumed.headers["location"].endswith(link), job_id
        assert store.get(job_id).status is JobStatus.PENDING


def test_a_signed_out_visit_comes_back_to_the_same_job(store: StateStore, tokens: Tokens) -> None:
    make(store, "invoice/2026/42")
    client = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    first = client.get("/jobs/invoice%2F2026%2F42", follow_redirects=False)
    assert first.status_code == 303
    login = re.search(r'name="csrf_token" value="([^"]+)"', client.get(first.headers["location"]).text)
    assert login is not None
    back = client.post(first.headers["location"], data={"token": tokens.viewer, "csrf_token": login.group(1)},
                       follow_redirects=False)
    assert back.headers["location"] == "/jobs/invoice%2F2026%2F42"
    assert client.get(back.headers["location"]).status_code == 200
