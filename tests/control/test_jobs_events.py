"""`reliable jobs events` on both databases: filters, collapsed checkpoints, and who acted (worker or operator)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from click.testing import CliRunner, Result
from control_helpers import ended, running

from reliable.cli.main import cli
from reliable.states import Event
from reliable.store import StateStore

from support import Clock


def run(store_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--store", store_url], env={"RELIABLE_OPERATOR": "carol", "COLUMNS": "220"})


def lines(result: Result, word: str) -> list[str]:
    """The table rows whose event column starts with `word`."""
    return [line for line in result.output.splitlines() if line.split("│")[2:3] and
            line.split("│")[2].strip().startswith(word)]


def as_json(store_url: str, *args: str) -> Any:
    result = run(store_url, "jobs", "events", *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_consecutive_checkpoints_are_one_line_unless_all(store: StateStore, store_url: str) -> None:
    job = running(store, "j")
    for page in range(60):
        store.save_checkpoint("j", job.lease_id, {"page": page}, lease_ttl=60, worker_id="w1")
    store.transition("j", Event.PAUSE_REQUEST, operator="dana", reason="look")
    for page in range(60, 63):
        store.save_checkpoint("j", job.lease_id, {"page": page}, lease_ttl=60, worker_id="w1")
    store.finish("j", job.lease_id, Event.SUCCEED, worker_id="w1")

    table = run(store_url, "jobs", "events", "j")
    assert table.exit_code == 0, table.output
    assert [line.split("│")[2].strip() for line in lines(table, "checkpoint")] == ["checkpoint x60", "checkpoint x3"]
    assert "{'page': 0} .. {'page': 59}" in lines(table, "checkpoint")[0]
    assert len(lines(table, "pause_requested")) == 1 and len(lines(table, "succeed")) == 1
    assert "67 events in 6 lines" in table.output and "--all shows each" in table.output

    every = run(store_url, "jobs", "events", "j", "--all")
    assert len(lines(every, "checkpoint")) == 63 and "collapsed" not in every.output
    events = as_json(store_url, "j")
    assert len(events) == 67 and sum(e["event"] == "checkpoint" for e in events) == 63  # JSON: never collapsed


def test_event_since_and_limit_filter(store: StateStore, store_url: str) -> None:
    clock = Clock(time.time() - 7200)  # two hours ago, then a minute ago: the CLI's "now" is the database's
    old = StateStore(store_url, clock=clock)
    job = running(old, "j")
    old.save_checkpoint("j", job.lease_id, {"page": 1}, lease_ttl=60, worker_id="w1")
    clock.now = time.time() - 60
    old.save_checkpoint("j", job.lease_id, {"page": 2}, lease_ttl=60, worker_id="w1")
    old.transition("j", Event.STOP_REQUEST, operator="dana", reason="runaway")
    old.close()

    assert [e["event"] for e in as_json(store_url, "j", "--event", "claim", "--event", "stop_requested")] == [
        "claim", "stop_requested"]
    assert [e["event"] for e in as_json(store_url, "j", "--since", "1h")] == ["checkpoint", "stop_requested"]
    assert [e["event"] for e in as_json(store_url, "j", "--limit", "2")] == ["checkpoint", "stop_requested"]
    assert [e["checkpoint"] for e in as_json(store_url, "j", "--event", "checkpoint", "--limit", "1")] == [
        {"page": 2}]
    an_hour_ago = datetime.fromtimestamp(time.time() - 3600, UTC)
    for iso in (an_hour_ago.isoformat(), an_hour_ago.replace(tzinfo=None).isoformat(timespec="seconds")):
        assert [e["event"] for e in as_json(store_url, "j", "--since", iso)] == ["checkpoint", "stop_requested"]
    table = run(store_url, "jobs", "events", "j", "--since", "1h", "--event", "stop_requested")
    assert len(lines(table, "stop_requested")) == 1 and not lines(table, "checkpoint")

    nothing = run(store_url, "jobs", "events", "j", "--event", "resume")
    assert nothing.exit_code == 0 and "no event matches; it has no resume event (its events: " in nothing.output
    assert "stop_requested" in nothing.output  # the names it does have, to pick from


def test_bad_filters_are_usage_errors_naming_the_option(store: StateStore, store_url: str) -> None:
    running(store, "j")
    for args, option in ((["--since", "yesterday"], "--since"), (["--since", "-5m"], "--since"),
                         (["--since", "99999999999w"], "--since"), (["--limit", "0"], "--limit")):
        result = run(store_url, "jobs", "events", "j", *args)
        assert result.exit_code == 2 and f"Invalid value for '{option}'" in result.output, result.output


def test_operator_events_carry_the_operator_and_no_worker(store: StateStore, store_url: str) -> None:
    running(store, "r")  # claimed by worker w1
    ended(store, "f", Event.FAIL)  # ran on w1, which is still the job's last worker
    ended(store, "d", Event.DEAD_LETTER)
    for args in (["pause", "r"], ["restart", "f"], ["dlq", "discard", "d"]):
        result = run(store_url, *args, "--reason", "[ops] because")
        assert result.exit_code == 0, result.output
    refused = run(store_url, "resume", "f", "--reason", "by mistake")  # f is PENDING now
    assert refused.exit_code == 1
    assert store.get("f").worker_id == "w1"
    for job_id, names in (("r", ["pause_requested"]), ("f", ["restart", "command_refused"]), ("d", ["discarded"])):
        events = as_json(store_url, job_id)
        by_operator = [e for e in events if e["operator"] is not None]
        assert [e["event"] for e in by_operator] == names
        assert all(e["operator"] == "carol" and e["worker_id"] is None for e in by_operator), by_operator
        assert any(e["worker_id"] == "w1" for e in events), "the worker's own events keep their worker"
        table = run(store_url, "jobs", "events", job_id)
        assert "[ops] because" in table.output  # a reason is text, not markup
        for name in names:
            (row,) = lines(table, name)
            cells = [cell.strip() for cell in row.split("│")]
            assert cells[7:9] == ["-", "carol"], row  # worker, operator


def test_jobs_show_names_who_made_the_last_change(store: StateStore, store_url: str) -> None:
    ended(store, "f", Event.FAIL)
    shown = run(store_url, "jobs", "show", "f")
    assert "last_event" in shown.output and "fail at" in shown.output and "by worker w1" in shown.output
    assert run(store_url, "restart", "f", "--reason", "[urgent] input fixed").exit_code == 0
    shown = run(store_url, "jobs", "show", "f")
    assert "restart at" in shown.output and "by operator carol: [urgent] input fixed" in shown.output
    assert "by worker" not in shown.output
    last = json.loads(run(store_url, "jobs", "show", "f", "--json").output)["last_event"]
    assert (last["event"], last["operator"], last["worker_id"], last["reason"]) == ("restart", "carol", None,
                                                                                    "[urgent] input fixed")
