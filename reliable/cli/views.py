"""Rendering jobs for people: the listing and the detailed `show` of dlq, review (and friends)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.markup import escape
from rich.table import Table

from ..disclosure import ATTEMPT_FIELDS, EFFECT_FIELDS, EVENT_FIELDS, JOB_FIELDS, Audience, disclosed
from ..store import Attempt, Effect, Job, JobEvent, StateStore
from ..store.selection import JobFilter, Reader, count_jobs, select_jobs
from .common import emit_json, fmt_time, id_column, print_table, resolve_job_id, stdout_console

if TYPE_CHECKING:
    from .api_client import ApiClient

#: Who reads what a command prints: with the store's URL it could read every row itself, so values are
#: shown as stored; through `--api` they arrive already disclosed by the server for the token.
CLI_AUDIENCE = Audience.store_credentials()
#: Who selects jobs with the store's URL: it may search and act on every row (`selection.Reader`); through
#: `--api` the server selects for the token.
STORE_READER = Reader.trusted()

__all__ = ["CLI_AUDIENCE", "STORE_READER", "api_list_view", "job_dict", "list_view", "listed_dict", "render_list",
           "render_show", "show_any", "show_view"]


def job_dict(job: Job) -> dict[str, Any]:
    """A job as a JSON-ready dict."""
    return {name: getattr(job, name) for name in job.__dataclass_fields__}


def listed_dict(job: Job) -> dict[str, Any]:
    """A job as a listing's JSON row: without its message (as the API's listings; `show` has it)."""
    row = job_dict(job)
    row.pop("message")
    return row


def list_view(store: StateStore, flt: JobFilter, *, limit: int, as_json: bool, title: str) -> None:
    """List the jobs matching `flt`, most recently changed first, as a table or JSON."""
    total = count_jobs(store, flt, reader=STORE_READER)
    found = select_jobs(store, flt, reader=STORE_READER, limit=limit, newest_first=True)
    render_list(found, total, as_json=as_json, title=title)


def api_list_view(client: ApiClient, path: str, flt: JobFilter, *, limit: int, as_json: bool, title: str) -> None:
    """`list_view` through the API's listing at `path` (dlq, review)."""
    from .via_api import api_filter, list_jobs

    query = api_filter(JobFilter(**{**flt.__dict__, "statuses": (), "exclude_discarded": False}))
    found, total = list_jobs(client, path, query, limit=limit)
    render_list(found, total, as_json=as_json, title=title)


def render_list(found: list[Job], total: int | None, *, as_json: bool, title: str,
                audience: Audience = CLI_AUDIENCE) -> None:
    """Print a listing of `found` out of `total` matching jobs (None: more than shown, how many unknown),
    disclosed to `audience` (`reliable.disclosure`)."""
    found = [disclosed(job, JOB_FIELDS, audience) for job in found]
    if as_json:
        emit_json({"total": total, "jobs": [listed_dict(job) for job in found]})
        return
    counted = f"more than {len(found)}" if total is None else str(total)
    shown = f", showing {len(found)}" if total is None or total > len(found) else ""
    table = Table(id_column(), "status", "queue", "actor", "attempt", "error class", "last error", "checkpoint",
                  "updated", title=f"{title}: {counted} job(s){shown}")
    for job in found:
        table.add_row(job.job_id, job.status.value, job.queue, job.actor, str(job.attempt),
                      job.last_error_class or "-", (job.last_error_message or "-")[:60],
                      "-" if job.checkpoint is None else repr(job.checkpoint)[:30], fmt_time(job.updated_at))
    print_table(stdout_console(), table)


def show_view(store: StateStore, given: str, *, as_json: bool) -> None:
    """One job in full: state, last error, last checkpoint, attempt history, side effects and events.

    `given`: the job's id or a unique prefix of it (`resolve_job_id`).
    """
    job_id = resolve_job_id(store, given)
    render_show(store.get(job_id), store.attempts(job_id), store.events(job_id), store.effects(job_id),
                as_json=as_json)


def show_any(source: StateStore | ApiClient, given: str, *, as_json: bool) -> None:
    """`show_view` from the store, or from the API's job detail (its most recent events: the server's default)."""
    if isinstance(source, StateStore):
        show_view(source, given, as_json=as_json)
        return
    from .via_api import detail_records

    with source:
        job, attempts, events, effects = detail_records(source.job(given))
    render_show(job, attempts, events, effects, as_json=as_json)


def render_show(job: Job, attempts: list[Attempt], events: list[JobEvent], effects: list[Effect], *,
                as_json: bool, audience: Audience = CLI_AUDIENCE) -> None:
    """Print one job in full (see `show_view`), disclosed to `audience` (`reliable.disclosure`)."""
    job = disclosed(job, JOB_FIELDS, audience)
    attempts = [disclosed(a, ATTEMPT_FIELDS, audience) for a in attempts]
    events = [disclosed(e, EVENT_FIELDS, audience) for e in events]
    effects = [disclosed(e, EFFECT_FIELDS, audience) for e in effects]
    if as_json:
        emit_json({
            "job": job_dict(job), "attempts": [a.__dict__ for a in attempts],
            "last_error": {"class": job.last_error_class, "type": job.last_error_type,
                           "message": job.last_error_message},
            "checkpoint": {"value": job.checkpoint, "version": job.checkpoint_version,
                           "schema": job.checkpoint_schema, "at": job.checkpoint_at},
            "effects": [e.__dict__ for e in effects], "events": [e.as_dict() for e in events],
        })
        return
    console = stdout_console()
    console.print(f"[bold]{escape(job.job_id)}[/bold]  "
                  + escape(f"{job.status.value}  queue={job.queue}{_routed(job)}  actor={job.actor}  "
                           f"owner={job.owner or '-'}  attempts={job.attempt}  retries={job.retry_count}"),
                  highlight=False)
    console.print(escape(f"last error: {job.last_error_class or '-'} {job.last_error_type or ''}: "
                         f"{job.last_error_message or '-'}"), highlight=False)
    console.print(escape(f"checkpoint: {job.checkpoint!r} (version {job.checkpoint_version}, schema "
                         f"{job.checkpoint_schema}, at {fmt_time(job.checkpoint_at)})"), highlight=False)
    console.print(escape(f"side effects applied: {len(effects)}"
                         + (f" ({', '.join(e.op_key for e in effects[:5])}{'...' if len(effects) > 5 else ''})"
                            if effects else "")), highlight=False)
    table = Table("attempt", id_column("attempt_id"), "worker", "started", "ended", "outcome", "error",
                  title="attempts")
    for a in attempts:
        table.add_row(str(a.attempt), a.attempt_id, a.worker_id or "-", fmt_time(a.started_at), fmt_time(a.ended_at),
                      a.outcome or "-", f"{a.error_class or '-'}: {a.error_message or ''}"[:60])
    print_table(console, table)
    table = Table("at", "event", "from", "to", "operator", "host", "reason / error", title="events")
    for e in events:
        why = e.reason or (f"{e.error_class}: {e.error_message}" if e.error_class else "")
        table.add_row(fmt_time(e.at), e.event, e.from_status or "-", e.to_status or "-", e.operator or "-",
                      e.host or "-", why)
    print_table(console, table)


def _routed(job: Job) -> str:
    """" (routed from <its own queue>)" for a job whose retry waits on another queue."""
    return f" (routed from {job.home_queue})" if job.queue != job.home_queue else ""
