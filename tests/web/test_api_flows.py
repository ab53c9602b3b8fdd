"""Workflows and schedules in the API, the console and `reliable ... --api` (issue 28 items 3, 4, 7),
per endpoint and role, on SQLite and PostgreSQL, over workflows run by a real worker (StubBroker).

Roles: vera (viewer), otto (operator scoped to queue billing: out of scope here), dora (operator
scoped to queue default: in scope), ada (admin). A node's arguments and a schedule's declared
arguments quote SECRET: only who may act on their queue sees it.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import dramatiq
import pytest
from click.testing import CliRunner, Result
from control.cli_api_server import serve
from starlette.testclient import TestClient

import reliable
from reliable.access import ApiTokens
from reliable.cli.main import cli
from reliable.disclosure import (
    SCHEDULE_EVENT_FIELDS,
    SCHEDULE_FIELDS,
    SLOT_FIELDS,
    WORKFLOW_EVENT_FIELDS,
    WORKFLOW_FIELDS,
    WORKFLOW_NODE_FIELDS,
    Kind,
)
from reliable.recovery import Recovery
from reliable.redact import MASK
from reliable.schedules import Schedule, storage
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.selection import JobFilter, Reader, select_jobs
from reliable.store.workflows import WorkflowStore
from reliable.web import WebConfig, create_app

from middleware_harness import Harness, make_harness
from support import wait_for
from web_support import bearer, csrf_of, session

SECRET = "hunter2-zz"
POLICY = """\
version: 1
lease: {ttl: 2s, heartbeat_interval: 200ms, recovery_interval: 200ms, sweep_after: 1s, retry_grace: 500ms}
defaults:
  max_attempts: 2
  backoff: {base: 20ms, cap: 50ms}
rules:
  - {name: timeouts, exception: TimeoutError, class: transient}
  - {name: bad-values, exception: [ValueError, TypeError], class: invalid_input}
"""


@dataclass(frozen=True)
class People:
    """One token per caller."""

    vera: str  # viewer
    otto: str  # operator, queue billing only
    dora: str  # operator, queue default
    ada: str  # admin


@pytest.fixture
def harness(store_url: str, tmp_path: Path) -> Iterator[Harness]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    made = make_harness(store_url, policy, threads=2)
    yield made
    made.worker.stop()
    made.broker.close()
    made.store.close()


@pytest.fixture
def people(harness: Harness) -> People:
    tokens = ApiTokens(harness.store)
    return People(vera=tokens.create("vera", "viewer")[1],
                  otto=tokens.create("otto", "operator", queues=["billing"])[1],
                  dora=tokens.create("dora", "operator", queues=["default"])[1],
                  ada=tokens.create("ada", "admin")[1])


def _app(harness: Harness) -> Any:
    return create_app(harness.store, broker=harness.broker, config=WebConfig(secret_key="s"))


def failed_workflow(harness: Harness, broken: set[str], ran: Counter[str]) -> str:
    """extract -> (clean, stats) -> report; `clean` times out twice (DEAD: a dead letter)."""

    @dramatiq.actor(queue_name="default")
    def flow_step(name: str, password: str = "") -> str:
        ran[name] += 1
        if name in broken:
            raise TimeoutError(f"{name}: row 12 timed out")
        return name

    workflow_id = reliable.workflow("nightly-etl", [
        reliable.node("extract", flow_step.message("extract", password=SECRET)),
        reliable.node("clean", flow_step.message("clean", password=SECRET), after=["extract"]),
        reliable.node("stats", flow_step.message("stats"), after=["extract"]),
        reliable.node("report", flow_step.message("report"), after=["clean", "stats"]),
    ]).submit(harness.broker)
    harness.run()
    return workflow_id


def _walk(rows: Any, fields: Mapping[str, Kind]) -> None:
    for row in rows:
        assert set(row) <= set(fields), f"fields without a disclosure rule: {sorted(set(row) - set(fields))}"


def _last_event(harness: Harness, workflow_id: str) -> dict[str, Any]:
    return WorkflowStore(harness.store).events(workflow_id)[-1]


def _succeeded(harness: Harness, workflow_id: str) -> None:
    """Wait (bounded) for the workflow to succeed: its resumed nodes run on the harness's worker."""
    harness.join()
    wait_for(lambda: WorkflowStore(harness.store).get(workflow_id)["status"] == "SUCCEEDED",
             f"workflow {workflow_id} SUCCEEDED", timeout=30)


def _dead_letters(store: StateStore, workflow_id: str) -> list[str]:
    return [j.job_id for j in select_jobs(store, JobFilter(statuses=(JobStatus.DEAD,), workflow_id=(workflow_id,),
                                                           exclude_discarded=True),
                                          reader=Reader.trusted(), limit=None)]


def test_workflow_reads_commands_and_roles(harness: Harness, people: People) -> None:
    ran: Counter[str] = Counter()
    broken = {"clean"}
    workflow_id = failed_workflow(harness, broken, ran)
    (dead_job,) = _dead_letters(harness.store, workflow_id)
    with TestClient(_app(harness)) as client:
        listed = client.get("/api/v1/workflows", headers=bearer(people.vera))
        assert listed.status_code == 200, listed.text
        (row,) = listed.json()["workflows"]
        assert (row["workflow_id"], row["status"], row["nodes"]) == (workflow_id, "FAILED", 4)
        _walk(listed.json()["workflows"], WORKFLOW_FIELDS)
        assert client.get("/api/v1/workflows?status=succeeded", headers=bearer(people.vera)).json() == {
            "workflows": []}
        assert client.get("/api/v1/workflows?status=nope", headers=bearer(people.vera)).status_code == 400
        assert client.get("/api/v1/workflows").status_code == 401

        # The viewer reads the graph, the states and the failed node's error; the arguments masked.
        viewed = client.get(f"/api/v1/workflows/{workflow_id[:8]}", headers=bearer(people.vera))
        assert viewed.status_code == 200, viewed.text
        detail = viewed.json()
        states = {n["node"]: n["state"] for n in detail["nodes"]}
        assert states == {"extract": "SUCCEEDED", "clean": "DEAD", "stats": "SUCCEEDED", "report": "UPSTREAM_FAILED"}
        clean = next(n for n in detail["nodes"] if n["node"] == "clean")
        assert clean["job_id"] == dead_job and "row 12 timed out" in clean["last_error_message"]
        assert ["clean", "report"] in detail["edges"] and ["stats", "report"] in detail["edges"]
        assert detail["masked"] is True and SECRET not in viewed.text and MASK in viewed.text
        _walk(detail["nodes"], WORKFLOW_NODE_FIELDS)
        _walk(detail["events"], WORKFLOW_EVENT_FIELDS)
        for token in (people.dora, people.ada):  # who may act on queue default sees the values
            assert SECRET in client.get(f"/api/v1/workflows/{workflow_id}", headers=bearer(token)).text
        assert SECRET not in client.get(f"/api/v1/workflows/{workflow_id}", headers=bearer(people.otto)).text
        assert client.get("/api/v1/workflows/nope-nope", headers=bearer(people.vera)).status_code == 404

        # Refusals: audited on the workflow, as the caller.
        body = {"reason": "row 12 fixed"}
        for token, name in ((people.vera, "vera"), (people.otto, "otto")):
            refused = client.post(f"/api/v1/workflows/{workflow_id}/resume", json=body, headers=bearer(token))
            assert refused.status_code == 403, refused.text
            assert refused.json()["outcome"] == "refused" and refused.json()["error"]["status"] == 403
            event = _last_event(harness, workflow_id)
            assert (event["event"], event["operator"]) == ("command_refused", name)
        no_reason = client.post(f"/api/v1/workflows/{workflow_id}/resume", json={}, headers=bearer(people.ada))
        assert no_reason.status_code == 400 and "reason" in no_reason.text
        state_refusal = client.post(f"/api/v1/workflows/{workflow_id}/pause", json=body, headers=bearer(people.dora))
        assert state_refusal.status_code == 409 and "FAILED" in state_refusal.json()["message"]
        assert client.post(f"/api/v1/workflows/{workflow_id}/explode", json=body,
                           headers=bearer(people.ada)).status_code == 404

        # The dry run shows the plan and changes nothing.
        dry = client.post(f"/api/v1/workflows/{workflow_id}/resume", json={**body, "dry_run": True},
                          headers=bearer(people.dora))
        assert dry.status_code == 200, dry.text
        assert dry.json()["outcome"] == "dry_run"
        assert (dry.json()["plan"]["keep"], dry.json()["plan"]["rerun"]) == (["extract", "stats"], ["clean", "report"])
        assert WorkflowStore(harness.store).get(workflow_id)["run"] == 1

        # The scoped operator resumes it; it succeeds; the DEAD job it superseded leaves the dead letters.
        broken.clear()
        done = client.post(f"/api/v1/workflows/{workflow_id}/resume", json=body, headers=bearer(people.dora))
        assert done.status_code == 200 and done.json()["outcome"] == "done", done.text
        harness.join()
        Recovery(harness.store, harness.broker, harness.middleware.policy, sweep_after=0.0).run_once()
        _succeeded(harness, workflow_id)
        assert ran["clean"] == 3 and ran["extract"] == 1
        assert _dead_letters(harness.store, workflow_id) == []
        dlq = client.get("/api/v1/dlq", headers=bearer(people.ada)).json()["jobs"]
        assert dead_job not in [j["job_id"] for j in dlq]
        assert harness.store.get(dead_job).status is JobStatus.DEAD  # its history stays
        (why,) = [e for e in harness.store.events(dead_job) if e.event == "discarded"]
        assert why.detail["command"] == "superseded" and why.detail["workflow_id"] == workflow_id
        assert "succeeded in run 2" in (why.reason or "")
        resumed = next(e for e in WorkflowStore(harness.store).events(workflow_id) if e["event"] == "workflow_resume")
        assert (resumed["operator"], resumed["reason"]) == ("dora", "row 12 fixed")


def test_a_workflow_that_fails_again_after_a_resume_keeps_its_dead_letters(harness: Harness, people: People) -> None:
    ran: Counter[str] = Counter()
    workflow_id = failed_workflow(harness, {"clean"}, ran)
    with TestClient(_app(harness)) as client:
        done = client.post(f"/api/v1/workflows/{workflow_id}/resume", json={"reason": "try again"},
                           headers=bearer(people.ada))
        assert done.status_code == 200, done.text
        harness.join()
        Recovery(harness.store, harness.broker, harness.middleware.policy, sweep_after=0.0).run_once()
        harness.join()
    wait_for(lambda: WorkflowStore(harness.store).get(workflow_id)["status"] == "FAILED", "FAILED again", timeout=30)
    assert len(_dead_letters(harness.store, workflow_id)) == 2  # nothing superseded them


def _declare(harness: Harness, name: str = "nightly", queue: str = "default") -> None:
    """A schedule of actor `work` (declared, so a triggered job runs), its kwargs quoting SECRET."""

    @dramatiq.actor(broker=harness.broker, queue_name=queue)
    def work(password: str = "") -> None:
        """What the schedule runs."""

    store = harness.store
    template = {"queue": queue, "actor": "work", "owner": None, "checkpoint_schema": None,
                "message": {"queue_name": queue, "actor_name": "work", "args": [], "kwargs": {"password": SECRET},
                            "options": {"reliable_registered": True}, "message_timestamp": 0}}
    storage.declare(store, Schedule(name, "work", every="1h", kwargs={"password": SECRET}), template)


def test_schedule_reads_commands_and_roles(harness: Harness, people: People) -> None:
    store = harness.store
    _declare(harness)
    with TestClient(_app(harness)) as client:
        listed = client.get("/api/v1/schedules", headers=bearer(people.vera))
        assert listed.status_code == 200, listed.text
        (row,) = listed.json()["schedules"]
        assert (row["name"], row["timing"], row["paused"], row["slots_fired"]) == ("nightly", "every 3600s", False, 0)
        assert row["next_slot"] is not None
        assert SECRET not in listed.text and row["definition"]["kwargs"] == {"password": MASK}
        _walk(listed.json()["schedules"], SCHEDULE_FIELDS)
        assert SECRET in client.get("/api/v1/schedules", headers=bearer(people.ada)).text
        assert client.get("/api/v1/schedules/nope", headers=bearer(people.vera)).status_code == 404

        body = {"reason": "maintenance window"}
        for token, name in ((people.vera, "vera"), (people.otto, "otto")):
            refused = client.post("/api/v1/schedules/nightly/pause", json=body, headers=bearer(token))
            assert refused.status_code == 403 and refused.json()["outcome"] == "refused", refused.text
            trail = storage.list_events(store, "nightly")
            assert (trail[-1].event, trail[-1].operator) == ("command_refused", name)
        assert storage.get_schedule(store, "nightly").paused is False
        assert client.post("/api/v1/schedules/nightly/pause", json={}, headers=bearer(people.dora)).status_code == 400

        paused = client.post("/api/v1/schedules/nightly/pause", json=body, headers=bearer(people.dora))
        assert paused.status_code == 200 and paused.json()["outcome"] == "done" and paused.json()["paused"] is True
        again = client.post("/api/v1/schedules/nightly/pause", json=body, headers=bearer(people.dora))
        assert again.json()["outcome"] == "unchanged"
        resumed = client.post("/api/v1/schedules/nightly/resume", json=body, headers=bearer(people.dora))
        assert resumed.json()["outcome"] == "done" and resumed.json()["next_slot"] is not None

        triggered = client.post("/api/v1/schedules/nightly/trigger", json={"reason": "rerun the report"},
                                headers=bearer(people.dora))
        assert triggered.status_code == 200, triggered.text
        job_id = triggered.json()["job_id"]
        assert triggered.json()["published"] is True  # on the app's broker
        harness.store.get(job_id)  # registered

        detail = client.get("/api/v1/schedules/nightly", headers=bearer(people.vera))
        assert detail.status_code == 200, detail.text
        shown = detail.json()
        events = [(e["event"], e["operator"]) for e in shown["events"]]
        assert ("pause", "dora") in events and ("resume", "dora") in events and ("trigger", "dora") in events
        assert SECRET not in detail.text
        _walk([shown["schedule"]], SCHEDULE_FIELDS)
        _walk(shown["slots"], SLOT_FIELDS)
        _walk(shown["events"], SCHEDULE_EVENT_FIELDS)


def test_the_pages_draw_the_graph_and_run_the_commands(harness: Harness, people: People) -> None:
    ran: Counter[str] = Counter()
    broken = {"clean"}
    workflow_id = failed_workflow(harness, broken, ran)
    _declare(harness)
    viewer, _ = session(harness.store, people.vera, broker=harness.broker)
    with viewer:
        page = viewer.get(f"/workflows/{workflow_id}")
        assert page.status_code == 200, page.text
        assert '<svg xmlns="http://www.w3.org/2000/svg" class="dag"' in page.text
        assert 'data-node="clean" data-state="DEAD"' in page.text and "row 12 timed out" in page.text
        assert SECRET not in page.text and "may not resume" in page.text
        assert workflow_id in viewer.get("/workflows").text
        assert "nightly" in viewer.get("/schedules").text
        schedule_page = viewer.get("/schedules/nightly")
        assert schedule_page.status_code == 200 and SECRET not in schedule_page.text
        assert viewer.get(f"/workflows/{workflow_id[:8]}", follow_redirects=False).status_code == 303
    operator, csrf = session(harness.store, people.dora, broker=harness.broker)
    with operator:
        plan = operator.post(f"/workflows/{workflow_id}/actions/resume",
                             data={"reason": "row 12 fixed", "dry_run": "yes", "csrf_token": csrf})
        assert plan.status_code == 200 and "run again" in plan.text and "clean, report" in plan.text
        broken.clear()
        done = operator.post(f"/workflows/{workflow_id}/actions/resume",
                             data={"reason": "row 12 fixed", "csrf_token": csrf_of(plan.text)})
        assert done.status_code == 200 and "resume: resumed" in done.text, done.text
        _succeeded(harness, workflow_id)
        fired = operator.post("/schedules/nightly/actions/trigger",
                              data={"reason": "rerun", "csrf_token": csrf_of(done.text)})
        assert fired.status_code == 200 and "triggered schedule nightly" in fired.text


def _cli(*args: str, token: str, api: str) -> Result:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RELIABLE_")}
    return CliRunner().invoke(cli, list(args), env={**clean, "RELIABLE_API": api, "RELIABLE_API_TOKEN": token,
                                                    "COLUMNS": "200"})


def _json_of(output: str) -> Any:
    """The --json document a command printed: from its first line that opens it (the harness's worker
    runs in this process and logs its events to the same stdout)."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line in ("{", "["))
    return json.loads("\n".join(lines[start:]))


def test_the_cli_reads_and_acts_through_the_api(harness: Harness, people: People) -> None:
    ran: Counter[str] = Counter()
    broken = {"clean"}
    workflow_id = failed_workflow(harness, broken, ran)
    _declare(harness)
    with serve(_app(harness)) as api:
        listed = _cli("workflow", "list", "--json", token=people.vera, api=api)
        assert listed.exit_code == 0, listed.output
        assert [w["workflow_id"] for w in _json_of(listed.output)] == [workflow_id]
        shown = _cli("workflow", "show", workflow_id[:8], token=people.vera, api=api)
        assert shown.exit_code == 0, shown.output
        assert "├── clean  DEAD  TimeoutError: clean: row 12 timed out" in shown.output
        as_json = _json_of(_cli("workflow", "show", workflow_id, "--json", token=people.vera, api=api).output)
        assert {n["node"]: n["state"] for n in as_json["nodes"]}["report"] == "UPSTREAM_FAILED"
        assert SECRET not in json.dumps(as_json)

        refused = _cli("workflow", "resume", workflow_id, "--reason", "fixed", token=people.otto, api=api)
        assert refused.exit_code == 1 and "may not" in refused.output, refused.output
        store_side = _cli("workflow", "resume", workflow_id, "--reason", "fixed", "--operator", "mallory",
                          token=people.dora, api=api)
        assert store_side.exit_code == 2 and "--operator cannot be used with --api" in store_side.output
        dry = _cli("workflow", "resume", workflow_id, "--reason", "fixed", "--dry-run", token=people.dora, api=api)
        assert dry.exit_code == 0 and "run again (2): clean, report" in dry.output, dry.output
        broken.clear()
        done = _cli("workflow", "resume", workflow_id, "--reason", "fixed", "--json", token=people.dora, api=api)
        assert done.exit_code == 0 and _json_of(done.output)["outcome"] == "done", done.output
        _succeeded(harness, workflow_id)

        schedules = _cli("schedules", "list", "--json", token=people.vera, api=api)
        assert schedules.exit_code == 0 and _json_of(schedules.output)[0]["name"] == "nightly", schedules.output
        refused = _cli("schedules", "pause", "nightly", "--reason", "window", token=people.vera, api=api)
        assert refused.exit_code == 1 and "may not pause" in refused.output, refused.output
        paused = _cli("schedules", "pause", "nightly", "--reason", "window", token=people.dora, api=api)
        assert paused.exit_code == 0 and "paused schedule nightly as dora" in paused.output, paused.output
        again = _cli("schedules", "pause", "nightly", "--reason", "window", token=people.dora, api=api)
        assert again.exit_code == 1 and "already paused" in again.output
        assert _cli("schedules", "resume", "nightly", "--reason", "over", token=people.dora, api=api).exit_code == 0
        fired = _cli("schedules", "trigger", "nightly", "--reason", "now", "--json", token=people.dora, api=api)
        assert fired.exit_code == 0, fired.output
        harness.store.get(_json_of(fired.output)["job_id"])
        show = _cli("schedules", "show", "nightly", token=people.vera, api=api)
        assert show.exit_code == 0 and "trigger" in show.output and "dora" in show.output, show.output
        assert SECRET not in show.output


def test_a_schedule_name_with_a_slash_works_in_every_route(harness: Harness, people: People) -> None:
    name = "reports/eu nightly"
    _declare(harness, name)
    segment = quote(name, safe="")
    with TestClient(_app(harness)) as client:
        detail = client.get(f"/api/v1/schedules/{segment}", headers=bearer(people.vera))
        assert detail.status_code == 200 and detail.json()["schedule"]["name"] == name, detail.text
        paused = client.post(f"/api/v1/schedules/{segment}/pause", json={"reason": "eu freeze"},
                             headers=bearer(people.dora))
        assert paused.status_code == 200 and paused.json()["paused"] is True, paused.text
    assert storage.get_schedule(harness.store, name).paused is True
    operator, csrf = session(harness.store, people.dora, broker=harness.broker)
    with operator:
        listing = operator.get("/schedules").text
        assert f'href="http://testserver/schedules/{segment}"' in listing
        page = operator.get(f"/schedules/{segment}")
        assert page.status_code == 200 and f"/schedules/{segment}/actions/resume" in page.text
        resumed = operator.post(f"/schedules/{segment}/actions/resume", data={"reason": "thawed", "csrf_token": csrf})
        assert resumed.status_code == 200 and str(resumed.url).endswith(f"/schedules/{segment}"), resumed.url
    assert storage.get_schedule(harness.store, name).paused is False


def test_a_reason_with_control_characters_is_refused_and_audited(harness: Harness, people: People) -> None:
    @dramatiq.actor(queue_name="default")
    def idle_step(name: str) -> None:
        """Never run here: the workflow is only submitted."""

    workflow_id = reliable.workflow("held", [reliable.node("a", idle_step.message("a"))]).submit(harness.broker)
    _declare(harness)
    bad = "fixed\x00 upstream"
    with TestClient(_app(harness)) as client:
        refused = client.post(f"/api/v1/workflows/{workflow_id}/pause", json={"reason": bad},
                              headers=bearer(people.dora))
        assert refused.status_code == 400 and "reason" in refused.json()["error"]["message"], refused.text
        event = _last_event(harness, workflow_id)
        assert (event["event"], event["operator"]) == ("command_refused", "dora")
        assert event["reason"] == "fixed\\x00 upstream"
        dry = client.post(f"/api/v1/workflows/{workflow_id}/pause", json={"reason": bad, "dry_run": True},
                          headers=bearer(people.dora))
        assert dry.status_code == 400 and _last_event(harness, workflow_id)["id"] == event["id"]
        refused = client.post("/api/v1/schedules/nightly/pause", json={"reason": bad}, headers=bearer(people.dora))
        assert refused.status_code == 400 and "reason" in refused.json()["error"]["message"], refused.text
        trail = storage.list_events(harness.store, "nightly")
        assert (trail[-1].event, trail[-1].operator, trail[-1].reason) == ("command_refused", "dora",
                                                                           "fixed\\x00 upstream")
    assert WorkflowStore(harness.store).get(workflow_id)["status"] == "RUNNING"
    assert storage.get_schedule(harness.store, "nightly").paused is False
    operator, csrf = session(harness.store, people.dora, broker=harness.broker)
    with operator:
        page = operator.post("/schedules/nightly/actions/pause", data={"reason": "bell\x07", "csrf_token": csrf})
        assert page.status_code == 200 and 'role="alert"' in page.text  # told on the page, nothing changed
        assert storage.get_schedule(harness.store, "nightly").paused is False
        assert storage.list_events(harness.store, "nightly")[-1].reason == "bell\\x07"
