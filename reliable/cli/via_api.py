"""The `--api` side of the commands: what the store side reads or runs, asked of the HTTP API instead.

Answers become the store's records again (`Job`, `JobEvent`, ...), so both sides print through the
same renderers and their tables and JSON have the same shape. Commands on job ids go one request
per job; commands by filter go through the API's bulk operations (count, confirm, follow).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, fields
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..bulk import RateLimiter
from ..control import command_states
from ..operations import ACTIVE_STATUSES
from ..states import JobStatus
from ..store import Attempt, Effect, Job, JobEvent
from ..store.selection import JobFilter
from .api_client import ApiClient, ApiError
from .common import emit_json
from .job_commands import EXIT_REFUSED, build_filter, confirm_selection, fail, has_filters, render_results

__all__ = [
    "POLL_SECONDS", "api_filter", "detail_records", "event_from_api", "from_api", "job_from_api", "list_jobs",
    "refuse_store_side", "run_by_filter", "run_command", "run_on_ids",
]

R = TypeVar("R")

#: Seconds between two polls of a running bulk operation (the first, then up to 2 s apart).
POLL_SECONDS = 0.25
_POLL_MAX = 2.0
#: Statuses of a bulk operation that is still to finish; any other is final.
_ACTIVE = frozenset(ACTIVE_STATUSES)
#: A refused command answers 403 (not authorized) or 409 (refused: state, validation, race).
_REFUSED = (403, 409)
EXIT_INTERRUPTED = 130
#: How `_follow` waits between polls (tests replace it).
_wait: Callable[[float], None] = time.sleep


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def from_api(cls: type[R], data: Mapping[str, Any]) -> R:
    """A record dataclass (Attempt, Effect, JobEvent) from its JSON; keys it does not have are ignored."""
    return cls(**{f.name: data.get(f.name, _default(f)) for f in fields(cls)})  # type: ignore[arg-type]


def job_from_api(data: Mapping[str, Any]) -> Job:
    """A Job from the API's JSON (Job.as_dict())."""
    job = from_api(Job, data)
    previous = data.get("previous_status")
    return Job(**{**job.__dict__, "status": JobStatus(data["status"]),
                  "previous_status": JobStatus(previous) if previous else None})


def list_jobs(client: ApiClient, path: str, params: Mapping[str, Any], *, limit: int) -> tuple[list[Job], int | None]:
    """Up to `limit` jobs of the listing at `path` (jobs, dlq, review), newest change first, and how
    many match in all (None when the server does not say and there are more)."""
    found: list[Job] = []
    total: int | None = None
    more = False
    for page in client.pages(path, params, limit=limit):
        found.extend(job_from_api(j) for j in page.get("jobs", []))
        total = page.get("total", total)
        more = bool(page.get("next_cursor"))
    found = found[:limit]
    if total is None and not more:
        total = len(found)
    return found, total


def event_from_api(data: Mapping[str, Any]) -> JobEvent:
    """A JobEvent from the API's JSON."""
    return from_api(JobEvent, data)


def detail_records(detail: Mapping[str, Any]) -> tuple[Job, list[Attempt], list[JobEvent], list[Effect]]:
    """A job detail's (GET /jobs/ID) parts as the store's records."""
    return (job_from_api(detail["job"]), [from_api(Attempt, a) for a in detail.get("attempts", [])],
            [event_from_api(e) for e in detail.get("events", [])],
            [from_api(Effect, e) for e in detail.get("effects", [])])


def api_filter(flt: JobFilter) -> dict[str, Any]:
    """The bulk operations API's filter for `flt` (the age becomes a change-time bound: this machine's clock)."""
    out: dict[str, Any] = {"exclude_discarded": flt.exclude_discarded or None,
                           "state": [JobStatus(s).value for s in flt.statuses], "ids": list(flt.job_ids),
                           "queue": list(flt.queue), "actor": list(flt.actor),
                           "error_class": list(flt.error_class), "owner": list(flt.owner),
                           "workflow": list(flt.workflow_id), "q": flt.search,
                           "changed_since": flt.changed_since, "changed_until": flt.changed_until}
    if flt.older_than is not None:
        until = time.time() - flt.older_than
        out["changed_until"] = min(until, out["changed_until"] or until)
    return {k: v for k, v in out.items() if v not in (None, [], "")}


def _refused(command: str, job: Job, exc: ApiError) -> dict[str, Any]:
    return {"command": command, "job_id": job.job_id, "outcome": "refused", "message": exc.message, "event": None,
            "status_before": job.status.value, "status": None, "version": None, "dispatched": False,
            "compensation": None, "warnings": []}


def run_on_ids(client: ApiClient, command: str, jobs: list[Job], params: Mapping[str, Any], err: Console,
               **kwargs: Any) -> list[dict[str, Any]]:
    """`command` on each job (already resolved: whole ids), `--rate` per second, a progress bar for several.

    A refusal (403, 409, or a job gone: 404) is a `refused` result, as on the store side; any other
    error (bad request, token, server down) ends the run.
    """
    body = {"reason": params.get("reason"), "dry_run": bool(params.get("dry_run")), **kwargs}
    rate = params.get("rate")
    limiter = RateLimiter(rate) if rate and not params.get("dry_run") else None
    results: list[dict[str, Any]] = []
    with Progress(TextColumn(command), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err,
                  transient=True, disable=len(jobs) <= 1) as bar:
        task = bar.add_task(command, total=len(jobs))
        for job in jobs:
            if limiter is not None:
                limiter.acquire()
            try:
                results.append(client.command(job.job_id, command, body))
            except ApiError as exc:
                if exc.status not in (*_REFUSED, 404):
                    raise
                results.append(_refused(command, job, exc))
            bar.update(task, completed=len(results))
    return results


def run_by_filter(client: ApiClient, command: str, flt: JobFilter, params: Mapping[str, Any], err: Console,
                  confirm: Any, **kwargs: Any) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """`command` on the jobs `flt` selects, as one bulk operation of the API: count, confirm, follow.

    `confirm(jobs, matched, acting)` shows the count and sample and asks (exits when not confirmed).
    Returns the finished operation and its results, or None when nothing ran (no match, dry run).
    More matching jobs than --limit is refused: the API acts on every job it counted.
    """
    options = {k: v for k, v in kwargs.items() if k in ("resolution", "allow_duplicate_side_effects")}
    dry_run = bool(params.get("dry_run"))
    op = client.create_operation({"command": command, "filter": api_filter(flt), "reason": params.get("reason"),
                                  "options": options, "rate": params.get("rate"), "dry_run": dry_run})
    started = dry_run  # a dry run is counted only: nothing is stored, nothing to withdraw
    try:
        total = int(op.get("total", 0))
        limit = int(params["limit"])
        if total == 0:
            _nothing(command, params, err)
            return None
        sample = [job_from_api(j) for j in op.get("sample_jobs", [])]
        for group in op.get("refusals") or []:  # the server's dry run of the command on each counted job
            err.print(f"{group['count']} of {total} would be refused: {group['why']}", markup=False, highlight=False,
                      soft_wrap=True)
        if total > limit:
            confirm(sample, total, total, ask=False)
            click.echo(f"error: {total} jobs match, more than --limit {limit}: an API operation acts on every job "
                       f"it counts; narrow the filters or pass --limit {total}", err=True)
            sys.exit(3)
        confirm(sample, total, total)
        if params.get("dry_run"):
            if params.get("as_json"):
                emit_json({"command": command, "matched": total, "limit": limit, "dry_run": True, "summary": {},
                           "results": [], "sample": [j.as_dict() for j in sample]})
            else:
                err.print(f"dry run: {command} would act on {total} job(s); nothing was changed")
            return None
        op = client.confirm_operation(str(op["operation_id"]), str(op["confirm_token"]))
        started = True
        op = _follow(client, command, op, total, err)
    finally:
        if not started:
            _cancel_quietly(client, op)
    return op, list(op.get("results") or [])


def _nothing(command: str, params: Mapping[str, Any], err: Console) -> None:
    if params.get("as_json"):
        emit_json({"command": command, "matched": 0, "dry_run": bool(params.get("dry_run")), "summary": {},
                   "results": []})
    else:
        err.print(f"{command}: no job matches")


def _cancel_quietly(client: ApiClient, op: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        return client.cancel_operation(str(op["operation_id"]))
    except (ApiError, KeyError):
        return None  # it was never confirmed (it expires) or it already ended


def _follow(client: ApiClient, command: str, op: dict[str, Any], total: int, err: Console) -> dict[str, Any]:
    """Poll the running operation until it ends, showing its progress; Ctrl-C cancels it on the server."""
    operation_id = str(op["operation_id"])
    wait = POLL_SECONDS
    shown = -1
    with Progress(TextColumn(command), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(), console=err,
                  transient=True) as bar:
        task = bar.add_task(command, total=total)
        try:
            while op.get("status") in _ACTIVE:
                _wait(wait)
                wait = min(wait * 2, _POLL_MAX)
                op = client.operation(operation_id)
                done = int(op.get("done", 0))
                bar.update(task, completed=done)
                if not err.is_terminal and done != shown:
                    click.echo(f"{command}: {done}/{total}", err=True)
                    shown = done
        except KeyboardInterrupt:
            bar.stop()
            final = _cancel_quietly(client, op) or op
            click.echo(f"interrupted: operation {operation_id} cancelled on the server after "
                       f"{final.get('done', op.get('done', 0))} of {total} job(s); those stay done", err=True)
            sys.exit(EXIT_INTERRUPTED)
    return op


#: Options that only mean something on the store side: through --api the server decides them.
_STORE_SIDE = {"operator_name": "--operator", "operators_file": "--operators-file", "policies_path": "--policies",
               "broker_url": "--broker"}


def refuse_store_side(params: Mapping[str, Any], extra: Mapping[str, str] | None = None) -> None:
    """--operator, --operators-file, --policies and --broker (and `extra`: parameter -> flag) given on
    the command line with --api are a usage error; from the environment, a warning: the server
    decides who you are, what you may do, the actors' contracts and the broker."""
    ctx = click.get_current_context(silent=True)
    for name, flag in {**_STORE_SIDE, **(extra or {})}.items():
        if not params.get(name):
            continue
        if ctx is None or ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(f"{flag} cannot be used with --api: the server decides who you are (from the "
                                   "token), what you may do, the actors' contracts and the broker", ctx=ctx)
        click.echo(f"warning: {flag} (from the environment) is ignored with --api: the server decides it", err=True)


def run_command(client: ApiClient, command: str, job_ids: tuple[str, ...], params: dict[str, Any], *,
             force_states: tuple[JobStatus, ...], exclude_discarded: bool, **kwargs: Any) -> None:
    """`reliable COMMAND --api URL ...`: on job ids one request each, by filter one bulk operation.

    Exit statuses as on the store side (control.EXIT_*); --operator, --operators-file, --policies
    and --broker are refused (the server decides them).
    """
    refuse_store_side(params)
    err = Console(stderr=True)
    # GET resolves a prefix (404 none, 409 several: exit 2, as on the store side) and gives the state before.
    found = [job_from_api(client.job(given, event_limit=1)["job"]) for given in dict.fromkeys(job_ids)]
    jobs = sorted({job.job_id: job for job in found}.values(), key=lambda j: (j.updated_at, j.job_id))
    limit: int = params["limit"]
    if not jobs or has_filters(params):
        flt = build_filter(params, tuple(j.job_id for j in jobs), default_states=command_states(command),
                           force_states=force_states, exclude_discarded=exclude_discarded)

        def confirm(sample: list[Job], matched: int, acting: int, *, ask: bool = True) -> None:
            confirm_selection(command, sample, matched, params, err, acting, ask=ask)

        ran = run_by_filter(client, command, flt, params, err, confirm, **kwargs)
        if ran is None:
            return
        op, results = ran
        counts = dict(op.get("counts") or {})
        render_results(command, results, counts, int(op.get("total", 0)), params, operation_id=op.get("operation_id"),
                status=op.get("status"))
        if op.get("status") != "finished":
            fail(f"operation {op.get('operation_id')} ended {op.get('status')}: not every job was acted on",
                  EXIT_REFUSED)
        if counts.get("refused"):
            sys.exit(EXIT_REFUSED)
        return
    if len(jobs) > 1:
        confirm_selection(command, jobs[:limit], len(jobs), params, err)
    results = run_on_ids(client, command, jobs[:limit], params, err, **kwargs)
    summary: dict[str, Any] = {}
    for r in results:
        summary[r["outcome"]] = summary.get(r["outcome"], 0) + 1
    summary["skipped_by_limit"] = max(0, len(jobs) - limit)
    render_results(command, results, summary, len(jobs), params)
    if summary.get("refused"):
        sys.exit(EXIT_REFUSED)
