"""`reliable workers list|quiet|resume|stop`: the worker processes on record (reliable.store.worker_views)
with their busy threads, and an operator's command on one (reliable.process_commands), through the
store or the HTTP API (`--api`), as `reliable queues pause|resume` does for a queue."""

from __future__ import annotations

import sys
from typing import Any
from urllib.parse import quote

import click
from rich.table import Table

from ..errors import ControlRefused
from ..operators import Operator, OperatorsPolicy
from .common import (
    audited_options,
    emit_json,
    fmt_time,
    handle_errors,
    id_column,
    open_source,
    print_table,
    run_audited,
    source_options,
    stdout_console,
)

__all__ = ["EXIT_REFUSED", "EXIT_UNCHANGED", "workers"]

EXIT_UNCHANGED = 1  # quiet of a quiet process, resume of one not quiet, a command on one that exited
EXIT_REFUSED = 1  # the operators policy refused it (audited on the process)
_EXIT_HELP = ("Exit status: 0 done; 1 nothing to do (already so, not quiet, or the process exited) or refused by "
              "the operators policy (audited); 2 bad input (a missing --reason, an unknown worker id) or the "
              "store/API unreachable.")


@click.group(short_help="Worker processes: list (busy threads), quiet, resume, stop.")
def workers() -> None:
    """The worker processes on record: one per process, written at its boot, stamped by its heartbeat.

    `quiet` a process to have it take no new message and finish its running ones, `resume` it to take
    messages again, `stop` it to have it finish them and exit (a `reliable worker` child is replaced in
    its slot). A process sees each within one heartbeat (`reliable docs console`).
    """


def _rows(source: Any, host: str | None, show_all: bool) -> list[dict[str, Any]]:
    """The processes as the API's JSON (`ProcessView.as_dict`): live ones, then (--all) the recent exits."""
    from ..store import StateStore

    if isinstance(source, StateStore):
        from ..store.worker_views import fleet

        found = fleet(source, host=host, exited=1000 if show_all else 0).as_dict()
    else:
        with source:
            found = source.request("GET", "workers", params={"host": host, "exited": 1000 if show_all else 0})
    return [*found["workers"], *(found["exited"] if show_all else [])]


@workers.command("list")
@source_options
@click.option("--all", "show_all", is_flag=True, help="Exited processes too (stopped, or seen dead).")
@click.option("--host", default=None, help="Only this host's processes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of processes.")
@handle_errors
def list_(store_url: str | None, api_url: str | None, token_file: str | None, show_all: bool, host: str | None,
          as_json: bool) -> None:
    """List the worker processes: host, pid, queues, threads, jobs held now, supervisor (and its
    restarts), start and last heartbeat.

    A process not marked exited may still be dead (only a certain death is marked: its pid gone or
    reused on its own host); its last heartbeat says how long it has been silent.
    """
    rows = _rows(open_source(store_url, api_url, token_file), host, show_all)
    if as_json:
        emit_json(rows)
        return
    table = Table(id_column("worker"), "host", "pid", "queues", "threads", "held", "busy threads", "command",
                  "supervisor", "started", "last heartbeat", "exited", title="worker processes")
    for row in rows:
        exited = "-" if row["exited_at"] is None else f"{fmt_time(row['exited_at'])} ({row['exit_reason']})"
        beat = fmt_time(row["last_beat_at"]) + (" (silent)" if row["silent"] else "")
        supervisor = "-" if row["supervisor_pid"] is None else \
            f"{row['supervisor_pid']}" + (f" (restarts: {row['restarts']})" if row["restarts"] else "")
        table.add_row(row["worker_id"], row["host"], str(row["pid"]),
                      ",".join(row["queues"]) if row["queues"] is not None else "*", str(row["threads"] or "-"),
                      str(row["jobs_held"]) if row["exited_at"] is None else "-", _busy(row), _command(row),
                      supervisor, fmt_time(row["started_at"]), beat, exited)
    print_table(stdout_console(), table)


def _busy(row: dict[str, Any]) -> str:
    """The process's busy threads, one `thread: job id (actor)` a line ("-": none)."""
    if row["exited_at"] is not None or not row["busy_threads"]:
        return "-"
    return "\n".join(f"{t['thread'] or '?'}: {t['job_id']} ({t['actor']})" for t in row["busy_threads"])


def _command(row: dict[str, Any]) -> str:
    """The operator command on the process ("-": none): quiet or stop, by whom and why."""
    if row["command"] is None:
        return "-"
    seen = "" if row["command_seen_at"] is not None or row["exited_at"] is not None else " (not picked up yet)"
    return f"{row['command']} by {row['command_operator']}: {row['command_reason']}{seen}"


_options = audited_options("quiet needs the command pause, resume resume and stop stop on every queue of the "
                           "process (\"*\" for one consuming every queue).", "the process's audit trail", api=True)


def _command_process(verb: str, worker_id: str, store_url: str | None, api_url: str | None, token_file: str | None,
                     reason: str | None, operator_name: str | None, operators_file: str | None,
                     as_json: bool) -> None:
    from ..commands import require_reason
    from ..store import StateStore

    require_reason(f"workers {verb}", reason)

    def on_store(store: StateStore) -> dict[str, Any]:
        from .. import process_commands

        operator = Operator.resolve(operator_name)
        changed = process_commands.command(store, worker_id, verb, reason=reason, identity=operator,
                                           operators=OperatorsPolicy.load(operators_file) if operators_file else None)
        return {"worker_id": worker_id, "command": verb, "changed": changed, "operator": operator.name}

    # refused by the policy (audited), an exited process or (resume) one not quiet: ControlRefused, 403 or 409
    result = run_audited(open_source(store_url, api_url, token_file), on_store,
                         f"workers/{quote(worker_id, safe='')}/{verb}", reason, refusals=(ControlRefused,),
                         statuses=(403, 409), exit_code=EXIT_REFUSED)
    if as_json:
        emit_json(result)
    elif not result["changed"]:
        click.echo(f"worker {worker_id} was already told to {verb} (or to stop): nothing changed", err=True)
    else:
        done = {"quiet": "quieted", "resume": "resumed", "stop": "told to stop"}[verb]
        click.echo(f"{done} worker {worker_id} as {result['operator']} (seen within a heartbeat)")
    if not result["changed"]:
        sys.exit(EXIT_UNCHANGED)


@workers.command(epilog=_EXIT_HELP)
@click.argument("worker_id")
@source_options
@_options
@handle_errors
def quiet(worker_id: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
          operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    """Quiet WORKER_ID: it takes no new message (its deliveries go to the other processes) and finishes
    the running ones, until `resume`."""
    _command_process("quiet", worker_id, store_url, api_url, token_file, reason, operator_name, operators_file,
                     as_json)


@workers.command(epilog=_EXIT_HELP)
@click.argument("worker_id")
@source_options
@_options
@handle_errors
def resume(worker_id: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
           operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    """Resume a quiet WORKER_ID: it takes messages again (a process told to stop cannot be resumed)."""
    _command_process("resume", worker_id, store_url, api_url, token_file, reason, operator_name, operators_file,
                     as_json)


@workers.command(epilog=_EXIT_HELP)
@click.argument("worker_id")
@source_options
@_options
@handle_errors
def stop(worker_id: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
         operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    """Stop WORKER_ID: it finishes its running jobs and exits, as on SIGTERM (a `reliable worker` child
    is replaced in its slot; a stop is not taken back)."""
    _command_process("stop", worker_id, store_url, api_url, token_file, reason, operator_name, operators_file,
                     as_json)
