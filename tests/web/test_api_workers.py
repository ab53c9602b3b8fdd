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
from reliable.store.processes import WorkerProcess, mark_exited, register_process
from reliable.store.worker_views import fleet, restarts_of
from reliable.web import WebConfig, create_app
from reliable.web.openapi import document

from web_support import Tokens, bearer, session

BOOT = "boot-1"


def _process(worker_id: str, host: str, pid: int, *, supervisor: int | None = None,
             queues: tuple[str, ...] | None = ("billing",)) -> WorkerProcess:
    return WorkerProcess(worker_id=worker_id, host=host, pid=pid, start_ticks=pid * 10, boot_id=BOOT, queues=queues,
                         threads=4, supervisor_pid=supervisor)


@pytest.fixture
def fleet_store(store: StateStore) -> StateStore:
    register_process(store, _process("w-old", "host-a", 101, supervisor=100))
    assert mark_exited(store, "w-old", reason="pid_gone", observed_by="w-live")
    register_process(store, _process("w-live", "host-a", 102, supervisor=100))
    register_process(store, _process("w-other", "host-b", 201, queues=None))
    store.register(NewJob("job-held-1", "billing", "charge",
                          {"args": [], "kwargs": {"card": "4111-1111-1111-1111"}, "options": {}}))
    store.claim("job-held-1", worker_id="w-live", lease_ttl=60)
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
    assert [j.job_id for j in live["w-live"].held] == ["job-held-1"] and live["w-other"].held == ()
    assert live["w-live"].restarts == 1 and live["w-other"].restarts == 0
    assert [v.process.worker_id for v in found.exited] == ["w-old"]
    assert found.exited[0].process.exit_reason == "pid_gone" and found.exited[0].held == ()
    assert not live["w-live"].silent
    assert [v.process.worker_id for v in fleet(fleet_store, host="host-b").live] == ["w-other"]
    assert fleet(fleet_store, exited=0).exited == ()


def test_restarts_count_only_the_same_supervisors_earlier_children() -> None:
    child = WorkerProcess("c2", "h", 2, 1, BOOT, None, 1, 9, started_at=20.0, last_beat_at=20.0)
    siblings = [child,
                WorkerProcess("c1", "h", 1, 1, BOOT, None, 1, 9, started_at=10.0, last_beat_at=12.0, exited_at=12.0),
                WorkerProcess("x", "h", 3, 1, BOOT, None, 1, 8, started_at=10.0, last_beat_at=12.0, exited_at=12.0),
                WorkerProcess("y", "h", 4, 1, "other-boot", None, 1, 9, started_at=5.0, last_beat_at=6.0,
                              exited_at=6.0),
                WorkerProcess("z", "h", 5, 1, BOOT, None, 1, 9, started_at=30.0, last_beat_at=31.0, exited_at=31.0)]
    assert restarts_of(child, siblings) == 1
    assert restarts_of(WorkerProcess("n", "h", 7, 1, BOOT, None, 1, None), siblings) == 0


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_every_role_reads_the_fleet(fleet_store: StateStore, tokens: Tokens, role: str) -> None:
    with TestClient(create_app(fleet_store, config=WebConfig(secret_key="s"))) as client:
        answer = client.get("/api/v1/workers", headers=bearer(getattr(tokens, role)))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    conforms("WorkerList", body)
    live = {w["worker_id"]: w for w in body["workers"]}
    assert set(live) == {"w-live", "w-other"}
    assert live["w-live"]["jobs_held"] == 1 and live["w-live"]["held_jobs"] == [
        {"job_id": "job-held-1", "queue": "billing", "actor": "charge", "status": "RUNNING"}]
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
