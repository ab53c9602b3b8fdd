"""`reliable jobs`: list, show and trace jobs."""

from __future__ import annotations

import click
from rich.table import Table

from ..store import Job
from .common import (
    emit_json,
    fmt_time,
    handle_errors,
    id_column,
    job_id_argument,
    open_store,
    print_table,
    resolve_job_id,
    state_option,
    stdout_console,
    store_option,
)


def job_dict(job: Job) -> dict[str, object]:
    """A job as a JSON-ready dict."""
    return {name: getattr(job, name) for name in job.__dataclass_fields__}


@click.group()
def jobs() -> None:
    """List, show and trace jobs."""


@jobs.command("list")
@store_option
@state_option("Only jobs in these states (repeatable, any case).")
@click.option("--queue", help="Only this queue.")
@click.option("--actor", help="Only this actor.")
@click.option("--error-class", help="Only jobs whose last error has this class.")
@click.option("--workflow", "workflow_id", metavar="ID",
              help="Only the jobs of this workflow: a pipeline (the id of its first step) or a group with "
                   "completion callbacks (its completion id), their callbacks included.")
@click.option("--limit", default=50, show_default=True, help="At most this many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@handle_errors
def list_(store_url: str, states: tuple[str, ...], queue: str | None, actor: str | None,
          error_class: str | None, workflow_id: str | None, limit: int, as_json: bool) -> None:
    """List jobs, most recently updated first."""
    store = open_store(store_url)
    found = store.list_jobs(status=list(states) or None, queue=queue, actor=actor,
                            error_class=error_class, workflow_id=workflow_id, limit=limit)
    if as_json:
        emit_json([job_dict(job) for job in found])
        return
    table = Table(id_column(), "status", "queue", "actor", "attempt", "retries", "checkpoint", "updated")
    for job in found:
        table.add_row(job.job_id, job.status.value, job.queue, job.actor, str(job.attempt),
                      str(job.retry_count), repr(job.checkpoint) if job.checkpoint is not None else "-",
                      fmt_time(job.updated_at))
    print_table(stdout_console(), table)


@jobs.command()
@job_id_argument()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def show(job_id: str, store_url: str, as_json: bool) -> None:
    """Show one job: its state, lease, checkpoint, last error and attempts."""
    store = open_store(store_url)
    job_id = resolve_job_id(store, job_id)
    job = store.get(job_id)
    attempts = store.attempts(job_id)
    if as_json:
        emit_json({"job": job_dict(job), "attempts": [a.__dict__ for a in attempts]})
        return
    console = stdout_console()
    for name in ("job_id", "status", "queue", "actor", "owner", "attempt", "retry_count", "lease_id",
                 "worker_id", "checkpoint", "checkpoint_version", "last_error_class", "last_error_type",
                 "last_error_message", "trace_id", "workflow_id", "parent_job_id"):
        console.print(f"[bold]{name:>20}[/bold]  {getattr(job, name)}")
    for name in ("created_at", "started_at", "finished_at", "retry_at", "lease_expires_at", "updated_at"):
        console.print(f"[bold]{name:>20}[/bold]  {fmt_time(getattr(job, name))}")
    table = Table("attempt", id_column("attempt_id"), "worker", "started", "ended", "outcome", "error")
    for a in attempts:
        table.add_row(str(a.attempt), a.attempt_id, a.worker_id or "-", fmt_time(a.started_at),
                      fmt_time(a.ended_at), a.outcome or "-", a.error_class or "-")
    print_table(console, table)


@jobs.command()
@job_id_argument()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def events(job_id: str, store_url: str, as_json: bool) -> None:
    """The job's event history: every transition, who made it, when and why."""
    store = open_store(store_url)
    job_id = resolve_job_id(store, job_id)
    history = store.events(job_id)
    if as_json:
        emit_json([event.as_dict() for event in history])
        return
    table = Table("at", "event", "from", "to", "attempt", "lease", "worker", "operator", "reason / error")
    for e in history:
        why = e.reason or (f"{e.error_class}: {e.error_message}" if e.error_class else "")
        table.add_row(fmt_time(e.at), e.event, e.from_status or "-", e.to_status or "-", str(e.attempt),
                      str(e.lease_id), e.worker_id or "-", e.operator or "-", why)
    print_table(stdout_console(), table)
