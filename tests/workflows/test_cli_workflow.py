"""`reliable workflow ...` against real stores (SQLite and PostgreSQL), on workflows run by a real worker."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from click.testing import CliRunner, Result

import reliable
from reliable.cli.main import cli
from reliable.recovery import Recovery
from reliable.store.workflows import WorkflowStore

Harness = Any


def run(store_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, ["workflow", *args, "--store", store_url],
                              env={"RELIABLE_OPERATOR": "carol", "COLUMNS": "200"})


def failed_workflow(harness: Harness, ran: Counter[str], broken: set[str]) -> str:
    @dramatiq.actor(queue_name="default")
    def step(name: str) -> str:
        ran[name] += 1
        if name in broken:
            raise ValueError(f"{name}: bad row 12")
        return name

    workflow_id = reliable.workflow("nightly-etl", [
        reliable.node("extract", step.message("extract")),
        reliable.node("clean", step.message("clean"), after=["extract"]),
        reliable.node("stats", step.message("stats"), after=["extract"]),
        reliable.node("report", step.message("report"), after=["clean", "stats"]),
    ]).submit(harness.broker)
    harness.run()
    return workflow_id


def test_list_show_and_resume_through_the_cli(harness: Harness, store_url: str) -> None:
    ran: Counter[str] = Counter()
    broken = {"clean"}
    workflow_id = failed_workflow(harness, ran, broken)

    listed = run(store_url, "list", "--json")
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.output)
    assert (row["workflow_id"], row["name"], row["status"], row["nodes"]) == (workflow_id, "nightly-etl", "FAILED", 4)
    table = run(store_url, "list", "--status", "failed")
    assert "nightly-etl" in table.output and "FAILED" in table.output

    shown = run(store_url, "show", workflow_id[:8])
    assert shown.exit_code == 0, shown.output
    assert "extract  SUCCEEDED" in shown.output
    assert "├── clean  FAILED  ValueError: clean: bad row 12" in shown.output
    assert "│   └── report  UPSTREAM_FAILED" in shown.output
    assert "└── report  (drawn above)" in shown.output
    as_json = json.loads(run(store_url, "show", workflow_id, "--json").output)
    assert {n["node"]: n["state"] for n in as_json["nodes"]} == {
        "extract": "SUCCEEDED", "clean": "FAILED", "stats": "SUCCEEDED", "report": "UPSTREAM_FAILED"}

    no_reason = run(store_url, "resume", workflow_id)
    assert no_reason.exit_code == 2 and "--reason is required" in no_reason.output

    dry = run(store_url, "resume", workflow_id, "--reason", "row 12 fixed", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "keep (2): extract, stats" in dry.output and "run again (2): clean, report" in dry.output
    assert WorkflowStore(harness.store).get(workflow_id)["run"] == 1  # nothing written

    broken.clear()
    done = run(store_url, "resume", workflow_id, "--reason", "row 12 fixed", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["plan"]["rerun"] == ["clean", "report"]
    # No --broker: the jobs are registered; the workers' sweeper publishes them.
    Recovery(harness.store, harness.broker, harness.middleware.policy, sweep_after=0.0).run_once()
    harness.join()
    assert WorkflowStore(harness.store).get(workflow_id)["status"] == "SUCCEEDED"
    assert ran == Counter({"extract": 1, "stats": 1, "clean": 2, "report": 1})
    history = json.loads(run(store_url, "show", workflow_id, "--json").output)["events"]
    resume = next(e for e in history if e["event"] == "workflow_resume")
    assert (resume["operator"], resume["reason"]) == ("carol", "row 12 fixed")


def test_commands_on_a_finished_workflow_are_refused_with_exit_1(harness: Harness, store_url: str) -> None:
    ran: Counter[str] = Counter()
    workflow_id = failed_workflow(harness, ran, set())
    refused = run(store_url, "pause", workflow_id, "--reason", "too late")
    assert refused.exit_code == 1 and "the workflow is SUCCEEDED" in refused.output
    events = WorkflowStore(harness.store).events(workflow_id)
    assert events[-1]["event"] == "command_refused" and events[-1]["operator"] == "carol"
    unknown = run(store_url, "show", "nope")
    assert unknown.exit_code == 2 and "no workflow with id 'nope'" in unknown.output
    restarted = run(store_url, "restart", workflow_id, "--reason", "rerun for the audit")
    assert restarted.exit_code == 0 and "run again (4)" in restarted.output


def test_a_dramatiq_pipeline_shows_as_linked_jobs_and_ends_failed_instead_of_waiting(
        harness: Harness, store_url: str) -> None:
    @dramatiq.actor(queue_name="default")
    def first(x: int) -> int:
        return x + 1

    @dramatiq.actor(queue_name="default")
    def second(x: int) -> int:
        raise ValueError(f"cannot take {x}")

    @dramatiq.actor(queue_name="default")
    def third(x: int) -> None:
        raise AssertionError("never reached")

    pipe = dramatiq.pipeline([first.message(1), second.message(), third.message()], broker=harness.broker)
    pipe.run()
    harness.run()
    pipeline_id = pipe.messages[0].message_id
    shown = run(store_url, "show", pipeline_id)
    assert shown.exit_code == 0, shown.output
    assert f"linked jobs {pipeline_id}  (a Dramatiq pipeline or group)  FAILED  2 job(s)" in shown.output
    assert f"{pipeline_id}  first  SUCCEEDED" in shown.output
    assert "second  FAILED  cannot take 2" in shown.output
    as_json = json.loads(run(store_url, "show", pipeline_id, "--json").output)
    assert as_json["status"] == "FAILED" and len(as_json["jobs"]) == 2


DEFINITION = '''
import dramatiq
import reliable


def changed():
    step = dramatiq.get_broker().get_actor("cli_step")  # the application's broker (reliable installed)
    return reliable.workflow("cli", [reliable.node("a", step.message("a", "v1")),
                                     reliable.node("b", step.message("b", "v2"), after=["a"])])
'''


def test_resume_with_a_definition_and_a_broker_url_looks_actors_up_on_the_applications_broker(
        harness: Harness, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --broker gives a bare broker (no actor declared, reliable not installed): the new definition's
    # actors and contracts must come from the application's broker, which importing it set up.
    ran: list[str] = []

    @dramatiq.actor(queue_name="default")
    def cli_step(name: str, value: str) -> str:
        ran.append(f"{name}={value}")
        return f"{name}={value}"

    (tmp_path / "wf_cli_definition.py").write_text(textwrap.dedent(DEFINITION))
    monkeypatch.syspath_prepend(str(tmp_path))
    workflow_id = reliable.workflow("cli", [reliable.node("a", cli_step.message("a", "v1")),
                                            reliable.node("b", cli_step.message("b", "v1"), after=["a"])]
                                    ).submit(harness.broker)
    harness.run()
    assert ran == ["a=v1", "b=v1"]
    args = ["workflow", "resume", workflow_id, "--store", store_url, "--broker", "amqp://guest:guest@127.0.0.1:1/",
            "--reason", "b has a new input", "--definition", "wf_cli_definition:changed"]
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0, (dry.output, dry.exception)
    assert "  run again (1): b" in dry.output and "  changed (1): b" in dry.output
    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 0, (done.output, done.exception)
    harness.join()
    assert ran == ["a=v1", "b=v1", "b=v2"]
    assert WorkflowStore(harness.store).get(workflow_id)["status"] == "SUCCEEDED"


RESHAPED = '''
import dramatiq
import reliable


def reshaped():
    step = dramatiq.get_broker().get_actor("cli_other")
    return reliable.workflow("cli", [reliable.node("a", step.message("a", "v1")),
                                     reliable.node("z", step.message("z", "v1"), after=["a"])])


def undeclared():
    missing = dramatiq.Message(queue_name="default", actor_name="not_declared", args=("b", "v2"), kwargs={},
                               options={})
    step = dramatiq.get_broker().get_actor("cli_other")
    return reliable.workflow("cli", [reliable.node("a", step.message("a", "v1")),
                                     reliable.node("b", missing, after=["a"])])
'''


def test_resume_with_a_definition_that_cannot_apply_is_refused_not_a_traceback(
        harness: Harness, store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    @dramatiq.actor(queue_name="default")
    def cli_other(name: str, value: str) -> str:
        return name

    (tmp_path / "wf_cli_reshaped.py").write_text(textwrap.dedent(RESHAPED))
    monkeypatch.syspath_prepend(str(tmp_path))
    workflow_id = reliable.workflow("cli", [reliable.node("a", cli_other.message("a", "v1")),
                                            reliable.node("b", cli_other.message("b", "v1"), after=["a"])]
                                    ).submit(harness.broker)
    harness.run()
    result = CliRunner().invoke(cli, ["workflow", "resume", workflow_id, "--store", store_url, "--reason", "x",
                                      "--definition", "wf_cli_reshaped:reshaped", "--dry-run"])
    assert result.exit_code == 1, (result.output, result.exception)  # refused, as the command's help says
    assert "nodes added: ['z'], removed: ['b']" in result.output and "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["workflow", "resume", workflow_id, "--store", store_url, "--reason", "x",
                                      "--definition", "wf_cli_reshaped:undeclared", "--dry-run"])
    assert result.exit_code == 1, (result.output, result.exception)
    assert "node 'b': actor/queue not_declared/default, stored cli_other/default" in result.output
