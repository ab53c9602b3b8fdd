"""`reliable jobs`: list, show and trace jobs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..disclosure import ATTEMPT_FIELDS, EVENT_FIELDS, JOB_FIELDS, disclosed
from ..durations import DurationTooLong, parse_duration
from ..inputs import shorten
from ..isotime import FORMS as ISO_FORMS
from ..isotime import parse_time_text
from ..states import FAILURE_OUTCOMES
from ..store import Attempt, Job, JobEvent, StateStore
from ..store.job_history import last_failure
from .common import (
    emit_json,
    fmt_time,
    handle_errors,
    id_column,
    job_id_argument,
    open_source,
    print_table,
    resolve_job_id,
    source_options,
    state_option,
    stdout_console,
)
from .views import CLI_AUDIENCE, STORE_READER


def job_dict(job: Job) -> dict[str, object]:
    """A job as a JSON-ready dict."""
    return job.as_dict()


@click.group()
def jobs() -> None:
    """List, show and trace jobs."""


@jobs.command("list")
@source_options
@state_option("Only jobs in these states (repeatable, any case).")
@click.option("--queue", multiple=True, help="Only this queue (repeatable: any of them).")
@click.option("--actor", multiple=True, help="Only this actor (repeatable: any of them).")
@click.option("--error-class", multiple=True, help="Only jobs whose last error has this class (repeatable).")
@click.option("--workflow", "workflow_id", metavar="ID", multiple=True,
              help="Only the jobs of this workflow (repeatable): a pipeline (the id of its first step) or a group with "
                   "completion callbacks (its completion id), their callbacks included.")
@click.option("--limit", default=50, show_default=True, help="At most this many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@handle_errors
def list_(store_url: str | None, api_url: str | None, token_file: str | None, states: tuple[str, ...],
          queue: tuple[str, ...], actor: tuple[str, ...], error_class: tuple[str, ...],
          workflow_id: tuple[str, ...], limit: int, as_json: bool) -> None:
    """List jobs, most recently updated first."""
    source = open_source(store_url, api_url, token_file)
    if isinstance(source, StateStore):
        from ..store.selection import JobFilter, select_jobs, statuses

        flt = JobFilter(statuses=statuses(states), queue=queue, actor=actor, error_class=error_class,
                        workflow_id=workflow_id)
        found = select_jobs(source, flt, reader=STORE_READER, limit=limit, newest_first=True)
    else:
        from .via_api import list_jobs

        with source:
            found, _ = list_jobs(source, "jobs", {"state": [s.upper() for s in states], "queue": list(queue),
                                                  "actor": list(actor), "error_class": list(error_class),
                                                  "workflow": list(workflow_id)}, limit=limit)
    found = [disclosed(job, JOB_FIELDS, CLI_AUDIENCE) for job in found]
    if as_json:
        from .views import listed_dict

        emit_json([listed_dict(job) for job in found])
        return
    table = Table(id_column(), "status", "queue", "actor", "attempt", "retries", "checkpoint", "updated")
    for job in found:
        table.add_row(job.job_id, job.status.value, job.queue, job.actor, str(job.attempt),
                      str(job.retry_count), repr(job.checkpoint) if job.checkpoint is not None else "-",
                      fmt_time(job.updated_at))
    print_table(stdout_console(), table)


@jobs.command()
@job_id_argument()
@source_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def show(job_id: str, store_url: str | None, api_url: str | None, token_file: str | None, as_json: bool) -> None:
    """Show one job: its state, arguments, lease, checkpoint, last error, last event (who, why) and attempts."""
    source = open_source(store_url, api_url, token_file)
    attempts: list[Attempt]
    if isinstance(source, StateStore):
        job_id = resolve_job_id(source, job_id)
        job = source.get(job_id)
        attempts = source.attempts(job_id)
        last = next(iter(source.events(job_id, limit=1)), None)
        failure = last_failure(source, job_id)
    else:
        from .via_api import detail_records, event_from_api

        with source:
            job, attempts, history, _ = detail_records(source.job(job_id, event_limit=1))
            failed = [event_from_api(e) for e in source.events(job.job_id, event=sorted(FAILURE_OUTCOMES), limit=20)]
        last = history[-1] if history else None
        failure = next((e for e in reversed(failed) if e.traceback), None)
    job = disclosed(job, JOB_FIELDS, CLI_AUDIENCE)
    attempts = [disclosed(a, ATTEMPT_FIELDS, CLI_AUDIENCE) for a in attempts]
    last = None if last is None else disclosed(last, EVENT_FIELDS, CLI_AUDIENCE)
    failure = None if failure is None else disclosed(failure, EVENT_FIELDS, CLI_AUDIENCE)
    if as_json:
        emit_json({"job": job_dict(job), "attempts": [a.__dict__ for a in attempts],
                   "last_event": last.as_dict() if last else None,
                   "last_failure": failure_dict(failure)})
        return
    console = stdout_console()
    for name in ("job_id", "status", "queue", "actor", "owner", "attempt", "retry_count", "lease_id",
                 "worker_id", "checkpoint", "checkpoint_version", "last_error_class", "last_error_type",
                 "last_error_message", "trace_id", "workflow_id", "parent_job_id"):
        console.print(f"[bold]{name:>20}[/bold]  {escape(str(getattr(job, name)))}", highlight=False)
        if name == "actor":
            for part in ("args", "kwargs"):
                shown = (json.dumps(job.message.get(part, [] if part == "args" else {}), default=str)
                         if job.message is not None else "(too large to show here: GET /api/v1/jobs/<id>/message)")
                console.print(f"[bold]{part:>20}[/bold]  {escape(shown)}", highlight=False)
    for name in ("created_at", "started_at", "finished_at", "retry_at", "lease_expires_at", "updated_at"):
        console.print(f"[bold]{name:>20}[/bold]  {fmt_time(getattr(job, name))}")
    if last is not None:
        console.print(f"[bold]{'last_event':>20}[/bold]  {escape(describe_event(last))}", highlight=False)
    table = Table("attempt", id_column("attempt_id"), "worker", "started", "ended", "outcome", "error")
    for a in attempts:
        table.add_row(str(a.attempt), a.attempt_id, a.worker_id or "-", fmt_time(a.started_at),
                      fmt_time(a.ended_at), a.outcome or "-", a.error_class or "-")
    print_table(console, table)
    print_failure(console, failure)


def failure_dict(event: JobEvent | None) -> dict[str, object] | None:
    """`--json`'s `last_failure`: which event and attempt, when, and the traceback."""
    if event is None:
        return None
    return {"event": event.event, "at": event.at, "attempt": event.attempt, "attempt_id": event.attempt_id,
            "error_class": event.error_class, "error_type": event.error_type, "traceback": event.traceback}


def print_failure(console: Console, event: JobEvent | None) -> None:
    """The last failed attempt's traceback under a heading naming the event and attempt."""
    if event is None or event.traceback is None:
        return
    console.print(f"\n[bold]last failure[/bold]  {escape(event.event)} of attempt {event.attempt} at "
                  f"{fmt_time(event.at)}", highlight=False)
    console.print(escape(event.traceback.rstrip("\n")), highlight=False, markup=True, soft_wrap=True)


def describe_event(event: JobEvent) -> str:
    """One line: the event, when, who made it (an operator or a worker) and why."""
    who = f" by operator {event.operator}" if event.operator else f" by worker {event.worker_id}" \
        if event.worker_id else ""
    return f"{event.event} at {fmt_time(event.at)}{who}" + (f": {event.reason}" if event.reason else "")


def parse_since(ctx: click.Context | None, param: click.Parameter | None,
                value: str | None) -> timedelta | datetime | None:
    """--since: a duration back from now (10m, 2h, 1d) or an ISO time (UTC unless it has an offset)."""
    if value is None:
        return None
    try:
        return timedelta(seconds=parse_duration(value))
    except DurationTooLong as exc:
        raise click.BadParameter(str(exc)) from None
    except ValueError:
        pass
    try:
        return parse_time_text(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a duration back from now (30s, 10m, 2h, 1d) nor "
                                 f"{ISO_FORMS}") from None


@dataclass
class CheckpointRun:
    """Consecutive checkpoint events of one attempt (one lease), shown as one line."""

    events: list[JobEvent]


def collapse_checkpoints(history: list[JobEvent]) -> list[JobEvent | CheckpointRun]:
    """`history` with each run of two or more consecutive checkpoints of one lease as a CheckpointRun."""
    rows: list[JobEvent | CheckpointRun] = []
    for event in history:
        last = rows[-1] if rows else None
        if event.event == "checkpoint" and isinstance(last, CheckpointRun) \
                and last.events[-1].lease_id == event.lease_id:
            last.events.append(event)
        elif event.event == "checkpoint" and isinstance(last, JobEvent) and last.event == "checkpoint" \
                and last.lease_id == event.lease_id:
            rows[-1] = CheckpointRun([last, event])
        else:
            rows.append(event)
    return rows


def _short(value: object, width: int = 40) -> str:
    return shorten(repr(value), width)


@jobs.command()
@job_id_argument()
@source_options
@click.option("--event", "names", multiple=True, metavar="NAME",
              help="Only events with this name (repeatable): e.g. --event pause_requested --event resume.")
@click.option("--since", callback=parse_since, metavar="WHEN",
              help="Only events from then on: a duration back from now (10m, 2h, 1d) or an ISO time "
                   "(2026-06-01T12:00:00; UTC unless it has an offset).")
@click.option("--limit", type=click.IntRange(min=1), metavar="N",
              help="Only the most recent N events (of those --event and --since select; counted before collapsing).")
@click.option("--all", "show_all", is_flag=True,
              help="Show every checkpoint event. By default consecutive checkpoints of an attempt are one line.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: every event selected (never collapsed).")
@handle_errors
def events(job_id: str, store_url: str | None, api_url: str | None, token_file: str | None, names: tuple[str, ...],
           since: timedelta | datetime | None, limit: int | None, show_all: bool, as_json: bool) -> None:
    """The job's event history: every transition, who made it (worker or operator), when and why.

    \b
    Examples:
      reliable jobs events 3f2a9c1e                          # checkpoints collapsed: "checkpoint x60"
      reliable jobs events 3f2a9c1e --since 1h --limit 20    # the last 20 events of the last hour
      reliable jobs events 3f2a9c1e --event pause_requested --event resume --json
    """
    source = open_source(store_url, api_url, token_file)
    history: Callable[..., list[JobEvent]]
    now: Callable[[], float]
    if isinstance(source, StateStore):
        job_id = resolve_job_id(source, job_id)
        now, history = source.now, source.events
    else:
        from .via_api import event_from_api

        client = source
        job_id = client.job(job_id, event_limit=1)["job"]["job_id"]
        now = time.time  # the API takes epoch seconds: this machine's clock

        def api_history(job_id: str, *, events: tuple[str, ...] | None = None, since: float | None = None,
                        limit: int | None = None) -> list[JobEvent]:
            found = client.events(job_id, event=list(events or ()), since=since, limit=limit)
            return [event_from_api(e) for e in found]

        history = api_history

    start = None
    if since is not None:
        start = now() - since.total_seconds() if isinstance(since, timedelta) else since.timestamp()
    selected = [disclosed(e, EVENT_FIELDS, CLI_AUDIENCE)
                for e in history(job_id, events=names or None, since=start, limit=limit)]
    if as_json:
        emit_json([event.as_dict() for event in selected])
        return
    if not selected:
        known = sorted({e.event for e in history(job_id)}) if names else []
        missing = sorted(set(names) - set(known))
        hint = (f"; it has no {', '.join(missing)} event (its events: {', '.join(known)})" if missing and known
                else "")
        click.echo(f"job {job_id}: no event matches{hint}", err=True)
        return
    rows: list[JobEvent | CheckpointRun] = list(selected) if show_all else collapse_checkpoints(selected)
    caption = (f"{len(selected)} events in {len(rows)} lines: consecutive checkpoints collapsed (--all shows each)"
               if len(rows) < len(selected) else None)
    table = Table("at", "event", "from", "to", "attempt", "lease", "worker", "operator", "reason / error",
                  caption=caption)
    for row in rows:
        if isinstance(row, CheckpointRun):
            first, last = row.events[0], row.events[-1]
            table.add_row(fmt_time(first.at), f"checkpoint x{len(row.events)}", first.from_status or "-",
                          last.to_status or "-", str(first.attempt), str(first.lease_id), first.worker_id or "-",
                          "-", (f"{_short(first.checkpoint)} .. {_short(last.checkpoint)} "
                                      f"(until {fmt_time(last.at)})"))
            continue
        why = row.reason or (f"{row.error_class}: {row.error_message}" if row.error_class else "")
        if row.event == "checkpoint":
            why = _short(row.checkpoint)
        table.add_row(fmt_time(row.at), row.event, row.from_status or "-", row.to_status or "-", str(row.attempt),
                      str(row.lease_id), row.worker_id or "-", row.operator or "-", why)
    print_table(stdout_console(), table)
