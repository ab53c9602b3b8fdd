"""`reliable queues list|pause|resume`: the queues' figures, and pausing a whole queue
(reliable.queue_pauses), through the store or the HTTP API (`--api`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click
from rich.table import Table

from ..durations import format_duration
from ..errors import NotAuthorized
from ..operators import Operator, OperatorsPolicy
from .common import (
    audited_options,
    emit_json,
    fmt_time,
    handle_errors,
    open_source,
    print_table,
    run_audited,
    source_options,
    stdout_console,
)

__all__ = ["EXIT_REFUSED", "EXIT_UNCHANGED", "queues"]

if TYPE_CHECKING:
    from .api_client import ApiClient

QUEUES_PAGE = 1000  # GET /api/v1/queues's largest page
EXIT_UNCHANGED = 1  # pause of a paused queue, resume of one not paused: nothing written
EXIT_REFUSED = 1  # the operators policy refused it (audited on the queue)
_EXIT_HELP = ("Exit status: 0 done; 1 nothing to do (already so) or refused by the operators policy (audited); "
              "2 bad input (a missing --reason) or the store/API unreachable.")


@click.group(short_help="Queues: list their figures, pause and resume a whole queue.")
def queues() -> None:
    """Queues: jobs per state, oldest pending job, throughput and failure rate; pause and resume.

    A paused queue's deliveries are put off by every worker before their claim (no attempt spent,
    no thread held) until it is resumed; jobs already RUNNING go on. Workers see a pause or a resume
    within a few seconds (`reliable docs control`).
    """


@queues.command("list")
@source_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON (as GET /api/v1/queues answers).")
@handle_errors
def list_(store_url: str | None, api_url: str | None, token_file: str | None, as_json: bool) -> None:
    """List the queues: jobs per state, the oldest due PENDING job's age, finished jobs per hour and the
    failure rate over the last 24 hours, and who paused a paused queue, when and why."""
    from ..store import StateStore

    source = open_source(store_url, api_url, token_file)
    if isinstance(source, StateStore):
        from ..queue_pauses import paused, queue_figures
        from ..store.overview import overview

        answer: dict[str, Any] = queue_figures(overview(source), paused(source))
    else:
        with source:
            answer = _every_queue(source)
    if as_json:
        emit_json(answer)
        return
    table = Table("queue", "by state", "oldest pending", "per hour", "failure rate", "paused",
                  title="queues (figures over the last 24 h)")
    for row in answer["queues"]:
        age = row["oldest_pending_age_seconds"]
        rate = row["failure_rate"]
        pause = row["paused"]
        table.add_row(row["queue"], " ".join(f"{s}={n}" for s, n in row["by_state"].items()) or "-",
                      "-" if age is None else format_duration(age), str(row["throughput_per_hour"] or 0),
                      "-" if rate is None else f"{rate:.1%}",
                      "-" if pause is None else f"since {fmt_time(pause['paused_at'])} by {pause['operator']}: "
                                                f"{pause['reason']}")
    print_table(stdout_console(), table)


def _every_queue(api: ApiClient) -> dict[str, Any]:
    """GET /api/v1/queues's answer with every page's queues (it pages them by name)."""
    answer: dict[str, Any] = api.request("GET", "queues", params={"limit": QUEUES_PAGE})
    while cursor := answer.get("next_cursor"):
        page = api.request("GET", "queues", params={"limit": QUEUES_PAGE, "cursor": cursor})
        answer["queues"].extend(page["queues"])
        answer["next_cursor"] = page.get("next_cursor")
    return answer


_options = audited_options("needs the command pause/resume on the queue (for jobs of any owner).",
                           "the queue's audit trail", api=True)


def _set(command: str, queue: str, store_url: str | None, api_url: str | None, token_file: str | None,
         reason: str | None, operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    from ..commands import require_reason
    from ..store import StateStore

    require_reason(f"queues {command}", reason)

    def on_store(store: StateStore) -> dict[str, Any]:
        from .. import queue_pauses

        operator = Operator.resolve(operator_name)
        act = queue_pauses.pause if command == "pause" else queue_pauses.resume
        changed = act(store, queue, reason=reason, identity=operator,
                      operators=OperatorsPolicy.load(operators_file) if operators_file else None)
        return {"queue": queue, "command": command, "changed": changed, "paused": command == "pause",
                "operator": operator.name}

    result = run_audited(open_source(store_url, api_url, token_file), on_store,
                         f"queues/{quote(queue, safe='')}/{command}", reason, refusals=(NotAuthorized,),
                         statuses=(403,), exit_code=EXIT_REFUSED)
    if as_json:
        emit_json(result)
    elif not result["changed"]:
        click.echo(f"queue {queue} is already {'paused' if command == 'pause' else 'not paused'}: nothing changed",
                   err=True)
    else:
        click.echo(f"{command}d queue {queue} as {result['operator']}")
    if not result["changed"]:
        sys.exit(EXIT_UNCHANGED)


@queues.command(epilog=_EXIT_HELP)
@click.argument("queue")
@source_options
@_options
@handle_errors
def pause(queue: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
          operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    """Pause QUEUE: workers put its deliveries off (no attempt spent, no thread held) until `resume`.
    Jobs already RUNNING go on (pause them with `reliable pause --queue QUEUE`)."""
    _set("pause", queue, store_url, api_url, token_file, reason, operator_name, operators_file, as_json)


@queues.command(epilog=_EXIT_HELP)
@click.argument("queue")
@source_options
@_options
@handle_errors
def resume(queue: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
           operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    """Resume a paused QUEUE: its deferred deliveries run at their next try (within 30 s)."""
    _set("resume", queue, store_url, api_url, token_file, reason, operator_name, operators_file, as_json)
