"""Issue 42, item 5 ("there is `discard` but no purge"): `purge` is an alias of `discard` on every surface
(operators.SYNONYMS): `reliable dlq purge` is the same command as `dlq discard` (a filter counts first,
a reason is required, several jobs are confirmed, each discard is audited on its job), the API's bulk
operations and job commands take `purge` and run `discard`. Sidekiq's and Oban's "clear dead jobs"
empties the dead set; here the jobs leave the dead letters and keep their history until retention
deletes them (`reliable db prune --state DEAD`). On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'reliable[web]')")

from click.testing import CliRunner, Result
from starlette.testclient import TestClient

from reliable.cli.main import cli
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.web import WebConfig, create_app

from support import wait_for
from web_support import Tokens, bearer


def run(*args: str) -> Result:
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RELIABLE_")}
    return CliRunner().invoke(cli, list(args), env={**clean, "RELIABLE_OPERATOR": "carol"})


def _dead(store: StateStore, *ids: str, queue: str) -> None:
    for job_id in ids:
        store.register(NewJob(job_id, queue, "export", {"args": [], "kwargs": {}, "options": {}}))
        claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
        store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w1",
                     error=ErrorInfo("permanent", "ValueError", "bad row"))


def _discarded(store: StateStore, job_id: str) -> list[tuple[str | None, str | None]]:
    return [(e.operator, e.reason) for e in store.events(job_id) if e.event == "discarded"]


def test_dlq_purge_is_discard_counted_confirmed_and_audited(store: StateStore, store_url: str) -> None:
    _dead(store, "d1", "d2", queue="exports")
    _dead(store, "d3", queue="billing")
    assert "--reason is required" in run("dlq", "purge", "--queue", "exports", "--store", store_url).stderr
    refused = run("dlq", "purge", "--queue", "exports", "--reason", "bad batch", "--store", store_url)
    assert refused.exit_code != 0 and not _discarded(store, "d1")  # several jobs: asked, no tty answer
    dry = run("dlq", "purge", "--queue", "exports", "--reason", "bad batch", "--dry-run", "--json", "--store",
              store_url)
    assert dry.exit_code == 0 and sorted(r["job_id"] for r in json.loads(dry.stdout)["results"]) == ["d1", "d2"]
    done = run("dlq", "purge", "--queue", "exports", "--reason", "bad batch", "--yes", "--json", "--store", store_url)
    assert done.exit_code == 0, done.output
    assert sorted(r["job_id"] for r in json.loads(done.stdout)["results"]) == ["d1", "d2"]
    assert _discarded(store, "d1") == _discarded(store, "d2") == [("carol", "bad batch")]
    assert not _discarded(store, "d3")
    listed = json.loads(run("dlq", "list", "--json", "--store", store_url).stdout)
    assert [j["job_id"] for j in listed["jobs"]] == ["d3"]
    assert "`purge` is an alias of `discard`" in " ".join(run("dlq", "--help").stdout.split())


def test_the_api_takes_purge_for_a_bulk_operation_and_a_job(store: StateStore, tokens: Tokens) -> None:
    _dead(store, "d1", "d2", queue="billing")
    _dead(store, "d3", queue="billing")
    admin = bearer(tokens.admin)
    with TestClient(create_app(store, config=WebConfig(secret_key="s"))) as client:
        one = client.post("/api/v1/jobs/d3/purge", json={"reason": "duplicate"}, headers=admin)
        assert one.status_code == 200, one.text
        created = client.post("/api/v1/operations", headers=admin, json={
            "command": "purge", "reason": "poison batch",
            "filter": {"state": ["dead"], "queue": ["billing"], "exclude_discarded": True}})
        assert created.status_code == 201, created.text
        op = created.json()
        assert (op["command"], op["total"]) == ("discard", 2)  # the canonical name; d3 already discarded
        started = client.post(f"/api/v1/operations/{op['operation_id']}/confirm", headers=admin,
                              json={"confirm_token": op["confirm_token"]})
        assert started.status_code == 202, started.text
        ended_op = wait_for(lambda: (o := client.get(f"/api/v1/operations/{op['operation_id']}",
                                                     headers=admin).json())["status"] == "finished" and o,
                            "the purge to end", timeout=60)
        dlq = client.get("/api/v1/dlq", headers=admin).json()
    assert ended_op["counts"] == {"done": 2} and ended_op["operator"] == "ada" and ended_op["reason"] == "poison batch"
    assert _discarded(store, "d3") == [("ada", "duplicate")] and _discarded(store, "d1") == [("ada", "poison batch")]
    assert dlq["jobs"] == []
