"""`reliable workers list`: the worker processes on record (reliable.store.worker_views), from the store
or through the HTTP API (`--api`)."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

from .common import (
    emit_json,
    fmt_time,
    handle_errors,
    id_column,
    open_source,
    print_table,
    source_options,
    stdout_console,
)

__all__ = ["workers"]


@click.group(short_help="Worker processes on record: list.")
def workers() -> None:
    """The worker processes on record: one per process, written at its boot, stamped by its heartbeat."""


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
    table = Table(id_column("worker"), "host", "pid", "queues", "threads", "held", "supervisor", "started",
                  "last heartbeat", "exited", title="worker processes")
    for row in rows:
        exited = "-" if row["exited_at"] is None else f"{fmt_time(row['exited_at'])} ({row['exit_reason']})"
        beat = fmt_time(row["last_beat_at"]) + (" (silent)" if row["silent"] else "")
        supervisor = "-" if row["supervisor_pid"] is None else \
            f"{row['supervisor_pid']}" + (f" (restarts: {row['restarts']})" if row["restarts"] else "")
        table.add_row(row["worker_id"], row["host"], str(row["pid"]),
                      ",".join(row["queues"]) if row["queues"] is not None else "*", str(row["threads"] or "-"),
                      str(row["jobs_held"]) if row["exited_at"] is None else "-", supervisor,
                      fmt_time(row["started_at"]), beat, exited)
    print_table(stdout_console(), table)
