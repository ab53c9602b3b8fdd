"""The fleet (issue 28, item 1): GET /api/v1/workers, the console's /workers page and `reliable workers
list` (store and --api) over the store's worker-process records, on SQLite and PostgreSQL.

Three processes: a supervised child on host-a holding one job's lease, the sibling its supervisor
replaced (exited, pid gone), and an unsupervised process on host-b holding nothing.
"""

from __future__ import annotations

import json
import os
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner
from control.cli_api_server import serve
from starlette.testclient import TestClient

from reliable.cli.main import cli
from reliable.store import NewJob, StateStore
from reliable.store.process_commands import report
from reliable.store.processes import WorkerProcess, mark_exited, register_process
from reliable.store.worker_views import fleet
from reliable.web import WebConfig, create_app
from reliable.web.openapi import document

from web_support import Tokens, bearer, session

BOOT = "boot-1"


def _process(worker_id: str, host: str, pid: int, *, supervisor: int | None = None,
             queues: tuple[str, ...] | None = ("billing",), slot: int | None = None,
             restarts: int | None = None) -> WorkerProcess:
    return WorkerProcess(worker_id=worker_id, host=host, pid=pid, start_ticks=pid * 10, boot_id=BOOT, queues=queues,
                         threads=4, supervisor_pid=supervisor, slot=slot, restarts=restarts)


@pytest.fixture
def fleet_store(store: StateStore) -> StateStore:
    register_process(store, _process("w-old", "host-a", 101, supervisor=100, slot=0, restarts=0))
    assert mark_exited(store, "w-old", reason="pid_gone", observed_by="w-live")
    register_process(store, _process("w-live", "host-a", 102, supervisor=100, slot=0, restarts=1))
    register_process(store, _process("w-other", "host-b", 201, queues=None))
    store.register(NewJob("job-held-1", "billing", "charge",
                          {"args": [], "kwargs": {"card": "4111-1111-1111-1111"}, "options": {}}))
    store.claim("job-held-1", worker_id="w-live", lease_ttl=60)
    assert report(store, "w-live", [("job-held-1", "Thread-3")]) is None  # its heartbeat's report
    store.register(NewJob("job-waiting", "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    return store


def conforms(schema: str, value: Any) -> None:
    doc = document()
    jsonschema.Draft202012Validator({"$ref": f"#/components/schemas/{schema}",
                                     "components": doc["components"]}).validate(value)


def test_the_fleet_read(fleet_store: StateStore) -> None:
    found = fleet(fleet_store)
    live = {v.process.worker_id: v for v in found.live}
    assert set(live) == {"w-live", "w-other"}
    assert [(j.job_id, j.thread) for j in live["w-live"].held] == [("job-held-1", "Thread-3")]
    assert live["w-other"].held == () and found.live_total == 2 and found.next_cursor is None
    assert live["w-live"].restarts == 1 and live["w-other"].restarts is None
    assert [v.process.worker_id for v in found.exited] == ["w-old"]
    assert found.exited[0].process.exit_reason == "pid_gone" and found.exited[0].held == ()
    assert not live["w-live"].silent
    assert [v.process.worker_id for v in fleet(fleet_store, host="host-b").live] == ["w-other"]
    assert fleet(fleet_store, exited=0).exited == ()


def test_restarts_are_counted_on_the_slot_that_restarted(store: StateStore) -> None:
    """Issue 42: two children of one supervisor, the first killed once and replaced. The sibling that
    never crashed shows no restart (it counted its exited cousin before), the one replacement shows 1
    (not 2: the supervisor's own count of its slot, not a guess from the exited records)."""
    register_process(store, _process("c-a1", "h", 11, supervisor=10, slot=0, restarts=0))
    register_process(store, _process("c-b1", "h", 12, supervisor=10, slot=1, restarts=0))
    assert mark_exited(store, "c-a1", reason="pid_gone", observed_by="c-b1")
    register_process(store, _process("c-a2", "h", 13, supervisor=10, slot=0, restarts=1))
    live = {v.process.worker_id: v for v in fleet(store).live}
    assert {w: v.restarts for w, v in live.items()} == {"c-a2": 1, "c-b1": 0}
    assert live["c-a2"].process.slot == 0 and live["c-b1"].process.slot == 1


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_reads_the_fleet(fleet_store: StateStore, tokens: Tokens, role: str) -> None:
    with TestClient(create_app(fleet_store, config=WebConfig(secret_key="s"))) as client:
        answer = client.get("/api/v1/workers", headers=bearer(getattr(tokens, role)))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    conforms("WorkerList", body)
    live = {w["worker_id"]: w for w in body["workers"]}
    assert set(live) == {"w-live", "w-other"}
    started = fleet_store.get("job-held-1").started_at
    assert live["w-live"]["jobs_held"] == 1 and "held_jobs" not in live["w-live"]  # deprecated: asked for only
    assert live["w-live"]["busy_threads"] == [{"thread": "Thread-3", "job_id": "job-held-1", "actor": "charge",
                                               "queue": "billing", "status": "RUNNING", "started_at": started}]
    assert live["w-live"]["slot"] == 0 and live["w-other"]["restarts"] is None and not live["w-live"]["quiet"]
    assert live["w-live"]["restarts"] == 1 and live["w-live"]["supervisor_pid"] == 100
    assert live["w-live"]["queues"] == ["billing"] and live["w-other"]["queues"] is None
    assert [(w["worker_id"], w["exit_reason"]) for w in body["exited"]] == [("w-old", "pid_gone")]
    assert "4111-1111" not in answer.text  # no job value, only ids, queues, actors and states


def test_anonymous_gets_401_and_bad_parameters_400(fleet_store: StateStore, tokens: Tokens) -> None:
    with TestClient(create_app(fleet_store, config=WebConfig(secret_key="s"))) as client:
        assert client.get("/api/v1/workers").status_code == 401
        headers = bearer(tokens.viewer)
        assert client.get("/api/v1/workers?exited=-1", headers=headers).status_code == 400
        unknown = client.get("/api/v1/workers?hots=a", headers=headers)
        assert unknown.status_code == 400 and "'hots'" in unknown.json()["error"]["message"]
        only_b = client.get("/api/v1/workers?host=host-b&exited=0", headers=headers).json()
    assert [w["worker_id"] for w in only_b["workers"]] == ["w-other"] and only_b["exited"] == []


def test_the_workers_page(fleet_store: StateStore, tokens: Tokens) -> None:
    with TestClient(create_app(fleet_store, config=WebConfig(secret_key="s"))) as anonymous:
        assert anonymous.get("/workers", follow_redirects=False).status_code == 303
    client, _ = session(fleet_store, tokens.viewer)
    with client:
        page = client.get("/workers")
    assert page.status_code == 200
    text = page.text
    live, exited = text.split('id="exited"')
    assert 'data-worker="w-live"' in live and 'data-worker="w-other"' in live and "w-old" not in live
    assert "/jobs/job-held-1" in live and "1 restart" in live and "every queue" in live
    busy = live.split('id="busy"')[1]
    assert 'data-job="job-held-1"' in busy and "Thread-3" in busy
    assert 'data-worker="w-old"' in exited and "pid_gone" in exited
    assert 'href="http://testserver/workers" aria-current="page"' in text


def _cli(*args: str, env: dict[str, str]) -> list[dict[str, Any]]:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RELIABLE_")}
    result = CliRunner().invoke(cli, ["workers", "list", *args, "--json"], env={**clean, **env})
    assert result.exit_code == 0, result.output
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def test_workers_list_reads_the_same_through_the_api(fleet_store: StateStore, store_url: str,
                                                     tokens: Tokens) -> None:
    stored = _cli("--store", store_url, "--all", env={})
    assert [r["worker_id"] for r in stored][-1] == "w-old"
    assert {r["worker_id"]: r["jobs_held"] for r in stored} == {"w-live": 1, "w-other": 0, "w-old": 0}
    with serve(create_app(fleet_store, config=WebConfig(secret_key="s"))) as api_url:
        via_api = _cli("--api", api_url, "--all", env={"RELIABLE_API_TOKEN": tokens.viewer})
        live_only = _cli("--api", api_url, env={"RELIABLE_API_TOKEN": tokens.viewer})
        table = CliRunner().invoke(cli, ["workers", "list", "--api", api_url],
                                   env={"RELIABLE_API_TOKEN": tokens.viewer, "RELIABLE_STORE": None, "COLUMNS": "250"})

    def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "silent_seconds"} for r in rows]

    assert strip(via_api) == strip(stored)
    assert sorted(r["worker_id"] for r in live_only) == ["w-live", "w-other"]
    assert table.exit_code == 0 and "w-live" in table.output and "(restarts: 1)" in table.output


def test_held_jobs_only_when_included(fleet_store: StateStore, tokens: Tokens) -> None:
    """What a process holds is listed once (`busy_threads`, with each job's status); the deprecated
    `held_jobs` (the same jobs again: issue 42, 414 KB for 100 processes) only with ?include=held_jobs."""
    with TestClient(create_app(fleet_store, config=WebConfig(secret_key="s"))) as client:
        body = client.get("/api/v1/workers", params={"include": "held_jobs"}, headers=bearer(tokens.viewer)).json()
        refused = client.get("/api/v1/workers", params={"include": "jobs"}, headers=bearer(tokens.viewer))
    conforms("WorkerList", body)
    live = {w["worker_id"]: w for w in body["workers"]}
    started = fleet_store.get("job-held-1").started_at
    assert live["w-live"]["held_jobs"] == [
        {"job_id": "job-held-1", "queue": "billing", "actor": "charge", "status": "RUNNING", "started_at": started,
         "thread": "Thread-3"}]
    assert refused.status_code == 400 and "held_jobs" in refused.text
