"""`reliable workers list`: the worker processes on record (reliable.store.processes)."""

from __future__ import annotations

from dataclasses import asdict

import click
from rich.table import Table

from ..store.processes import list_processes
from .common import emit_json, fmt_time, handle_errors, id_column, open_store, print_table, stdout_console, store_option

__all__ = ["workers"]


@click.group(short_help="Worker processes on record: list.")
def workers() -> None:
    """The worker processes on record: one per process, written at its boot, stamped by its heartbeat."""


@workers.command("list")
@store_option
@click.option("--all", "show_all", is_flag=True, help="Exited processes too (stopped, or seen dead).")
@click.option("--host", default=None, help="Only this host's processes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of processes.")
@handle_errors
def list_(store_url: str | None, show_all: bool, host: str | None, as_json: bool) -> None:
    """List the worker processes: host, pid, queues, threads, supervisor, start and last heartbeat.

    A process not marked exited may still be dead (only a certain death is marked: its pid gone or
    reused on its own host); its last heartbeat says how long it has been silent.
    """
    rows = list_processes(open_store(store_url), host=host, live_only=not show_all)
    if as_json:
        emit_json([asdict(row) for row in rows])
        return
    table = Table(id_column("worker"), "host", "pid", "queues", "threads", "supervisor", "started", "last heartbeat",
                  "exited", title="worker processes")
    for row in rows:
        exited = "-" if row.exited_at is None else f"{fmt_time(row.exited_at)} ({row.exit_reason})"
        table.add_row(row.worker_id, row.host, str(row.pid), ",".join(row.queues) if row.queues is not None else "*",
                      str(row.threads or "-"), str(row.supervisor_pid or "-"), fmt_time(row.started_at),
                      fmt_time(row.last_beat_at), exited)
    print_table(stdout_console(), table)
