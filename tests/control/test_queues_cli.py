"""`reliable queues list|pause|resume` through the store and through the API (`--api`): the same
answers, the operators policy applied on both paths, refusals audited on the queue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'reliable[web]')")


from control_helpers import check, run, via

from reliable import queue_pauses
from reliable.access import ApiTokens
from reliable.store import NewJob, StateStore
from reliable.store.audit_trail import AuditEntry
from reliable.web import WebConfig, create_app

from cli_api_server import serve


@pytest.fixture
def api_store(sqlite_url: str) -> Iterator[StateStore]:
    store = StateStore(sqlite_url)
    yield store
    store.close()


@pytest.fixture
def api_url(api_store: StateStore) -> Iterator[str]:
    with serve(create_app(api_store, config=WebConfig(secret_key="t"))) as url:
        yield url


@pytest.fixture
def tokens(api_store: StateStore) -> dict[str, str]:
    made = ApiTokens(api_store)
    return {"viewer": made.create("vera", "viewer")[1],
            "operator": made.create("otto", "operator", queues=["exports"])[1]}




def test_pause_list_resume_through_the_store(api_store: StateStore, sqlite_url: str) -> None:
    api_store.register(NewJob("job-1", "exports", "export", {"args": [], "kwargs": {}, "options": {}}))
    assert "needs a reason" in check(run("queues", "pause", "exports", "--store", sqlite_url), 2).stderr
    out = check(run("queues", "pause", "exports", "--reason", "bad deploy", "--store", sqlite_url)).stdout
    assert out == "paused queue exports as carol\n"
    check(run("queues", "pause", "exports", "--reason", "again", "--store", sqlite_url), 1)  # nothing changed
    (row,) = json.loads(check(run("queues", "list", "--json", "--store", sqlite_url)).stdout)["queues"]
    assert row["queue"] == "exports" and row["paused"]["reason"] == "bad deploy" and row["by_state"] == {"PENDING": 1}
    assert "bad deploy" in check(run("queues", "list", "--store", sqlite_url)).stdout
    check(run("queues", "resume", "exports", "--reason", "rolled back", "--store", sqlite_url))
    trail = queue_pauses.events(api_store, "exports")
    assert [(e.event, e.operator) for e in trail] == [("pause", "carol"), ("resume", "carol")]
    # The one shape of the operators' audit trails (a process's, a limit's), its subject the queue.
    assert all(type(e) is AuditEntry and e.subject == "exports" for e in trail)


def test_an_operators_file_refuses_a_queue_outside_the_scope_audited(api_store: StateStore, sqlite_url: str,
                                                                       tmp_path: Path) -> None:
    policy = tmp_path / "operators.yaml"
    policy.write_text('operators:\n  carol: [operator]\nroles:\n  operator:\n'
                      '    - {commands: [pause, resume], queues: [exports]}\n')
    check(run("queues", "pause", "billing", "--reason", "r", "--store", sqlite_url, "--operators-file", str(policy)), 1)
    check(run("queues", "pause", "exports", "--reason", "r", "--store", sqlite_url, "--operators-file", str(policy)))
    assert queue_pauses.paused(api_store).names == {"exports"}
    assert [(e.event, e.operator) for e in queue_pauses.events(api_store, "billing")] == [("command_refused", "carol")]


def test_the_api_path_acts_as_the_token_and_refuses_outside_its_scope(api_store: StateStore, sqlite_url: str,
                                                                       api_url: str, tokens: dict[str, str]) -> None:
    by_api = check(via(api_url, tokens["operator"], "queues", "pause", "exports", "--reason", "maintenance"))
    assert by_api.stdout == "paused queue exports as otto\n"
    refused = check(via(api_url, tokens["operator"], "queues", "pause", "billing", "--reason", "m"), 1)
    assert "may not pause" in refused.stderr
    check(via(api_url, tokens["viewer"], "queues", "resume", "exports", "--reason", "m"), 1)
    listed = json.loads(check(via(api_url, tokens["viewer"], "queues", "list", "--json")).stdout)
    by_store = json.loads(check(run("queues", "list", "--json", "--store", sqlite_url)).stdout)
    assert [r["queue"] for r in listed["queues"]] == [r["queue"] for r in by_store["queues"]] == ["exports"]
    assert listed["queues"][0]["paused"]["operator"] == "otto"
    assert [(e.event, e.operator) for e in queue_pauses.events(api_store, "exports")] == [
        ("pause", "otto"), ("command_refused", "vera")]


def test_list_through_the_api_follows_the_pages_to_every_queue(api_store: StateStore, sqlite_url: str,
                                                               api_url: str, tokens: dict[str, str],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /api/v1/queues pages the queues by name: `queues list --api` lists them all, as on the store."""
    import reliable.cli.queues as cli_queues

    monkeypatch.setattr(cli_queues, "QUEUES_PAGE", 40)  # 105 queues: three pages
    api_store.register_many([NewJob(f"many-{n}", f"many-{n:03d}", "work", {"args": [], "kwargs": {}, "options": {}})
                             for n in range(105)])
    listed = json.loads(check(via(api_url, tokens["viewer"], "queues", "list", "--json")).stdout)
    stored = json.loads(check(run("queues", "list", "--json", "--store", sqlite_url)).stdout)
    names = [row["queue"] for row in listed["queues"]]
    assert names == [row["queue"] for row in stored["queues"]]
    assert len([name for name in names if name.startswith("many-")]) == 105 and listed["next_cursor"] is None
