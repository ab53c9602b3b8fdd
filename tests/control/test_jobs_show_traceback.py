"""`reliable jobs show` prints the last failed attempt's traceback; `--json` has it as `last_failure`."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result
from control_helpers import running

from reliable.cli.main import cli
from reliable.states import Event
from reliable.store import ErrorInfo, StateStore

FIRST = "Traceback (most recent call last):\n  File \"app.py\", line 3, in load\nTimeoutError: slow\n"
SECOND = "Traceback (most recent call last):\n  File \"app.py\", line 9, in load\nValueError: bad [bold]row[/bold]\n"


def run(store_url: str, *args: str) -> Result:
    return CliRunner().invoke(cli, [*args, "--store", store_url], env={"COLUMNS": "200"})


def test_show_prints_the_last_failed_attempts_traceback(store: StateStore, store_url: str) -> None:
    job = running(store, "f")
    store.finish("f", job.lease_id, Event.RETRY, worker_id="w1", retry_delay=0.0,
                 error=ErrorInfo("transient", "TimeoutError", "slow", FIRST))
    store.transition("f", Event.RETRY_DUE)
    again = store.claim("f", worker_id="w1", lease_ttl=60)
    store.finish("f", again.lease_id, Event.FAIL, worker_id="w1",
                 error=ErrorInfo("invalid_input", "ValueError", "bad row", SECOND))

    shown = run(store_url, "jobs", "show", "f")
    assert shown.exit_code == 0, shown.output
    assert "last failure  fail of attempt 2 at" in shown.output
    assert "ValueError: bad [bold]row[/bold]" in shown.output  # the traceback is text, never markup
    assert "TimeoutError: slow" not in shown.output  # only the last failure's

    failure = json.loads(run(store_url, "jobs", "show", "f", "--json").output)["last_failure"]
    assert (failure["event"], failure["attempt"], failure["traceback"]) == ("fail", 2, SECOND)
    assert failure["attempt_id"] == again.attempt_id


def test_show_without_a_failure_has_none(store: StateStore, store_url: str) -> None:
    job = running(store, "ok")
    store.finish("ok", job.lease_id, Event.SUCCEED, worker_id="w1")
    shown = run(store_url, "jobs", "show", "ok")
    assert shown.exit_code == 0 and "last failure" not in shown.output
    assert json.loads(run(store_url, "jobs", "show", "ok", "--json").output)["last_failure"] is None
