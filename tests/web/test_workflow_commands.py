"""Issue 42 item 5 for workflows (SQLite and PostgreSQL, a real worker on a StubBroker): the API's
workflow detail says which commands its state allows (the engine's own guards), and the console
offers only those: a SUCCEEDED workflow is never offered pause, stop or cancel."""

from __future__ import annotations

from collections import Counter

import dramatiq
import pytest
from starlette.testclient import TestClient
from test_api_flows import _app, failed_workflow, harness, people  # noqa: F401 (fixtures)

import reliable
from reliable.store.workflows import WorkflowStore
from reliable.workflows.engine import WORKFLOW_COMMANDS, command_refusal

from middleware_harness import Harness
from web_support import bearer, csrf_of


@pytest.mark.slow  # two workflows run by a real worker: about 7 s on PostgreSQL
def test_a_workflow_offers_only_what_its_state_allows(harness: Harness, people: object) -> None:  # noqa: F811
    ran: Counter[str] = Counter()
    failed_id = failed_workflow(harness, {"clean"}, ran)

    @dramatiq.actor(queue_name="default")
    def tidy(name: str) -> str:
        return name

    done_id = reliable.workflow("tidy-up", [reliable.node("one", tidy.message("one"))]).submit(harness.broker)
    harness.run()
    rows = WorkflowStore(harness.store)
    assert (rows.get(failed_id)["status"], rows.get(done_id)["status"]) == ("FAILED", "SUCCEEDED")
    admin = people.ada  # type: ignore[attr-defined]
    with TestClient(_app(harness)) as client:
        def commands(workflow_id: str) -> dict[str, str | None]:
            detail = client.get(f"/api/v1/workflows/{workflow_id}", headers=bearer(admin)).json()
            assert [c["command"] for c in detail["commands"]] == list(WORKFLOW_COMMANDS)
            assert all(c["allowed"] == (c["why"] is None) for c in detail["commands"])
            return {c["command"]: c["why"] for c in detail["commands"]}

        done = commands(done_id)
        assert {c for c, why in done.items() if why is None} == {"restart"}
        assert done["pause"] == done["stop"] == done["cancel"] == "the workflow is SUCCEEDED"
        assert "nothing to resume" in str(done["resume"])
        failed = commands(failed_id)
        assert {c for c, why in failed.items() if why is None} == {"resume", "restart"}
        snapshot = rows.snapshot(failed_id)
        assert failed == {c: command_refusal(c, snapshot) for c in WORKFLOW_COMMANDS}  # the engine's own rule

        login = client.get("/login").text
        client.post("/login", data={"token": admin, "csrf_token": csrf_of(login)})
        page = client.get(f"/workflows/{done_id}").text
        assert page.count('<form class="action"') == 1 and '/actions/restart"' in page
        assert '<li id="why-pause" data-command="pause"><strong>Pause</strong>: the workflow is SUCCEEDED' in page
        listing = client.get("/workflows").text
        assert 'class="state tone-bad" data-state="FAILED"' in listing
        assert 'class="state tone-good" data-state="SUCCEEDED"' in listing
