"""What the job commands share, on the store and through the API (`cli/control.py`, `cli/via_api.py`):
their exit codes, the filter built from their options, the confirmation step and the results' rendering."""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from ..states import JobStatus
from ..store import Job
from ..store.selection import JobFilter, statuses
from .common import emit_json, fmt_time, id_column, print_table, stdout_console

__all__ = ["EXIT_ERROR", "EXIT_REFUSED", "EXIT_UNCONFIRMED", "SAMPLE", "build_filter", "confirm_selection", "fail",
           "has_filters", "render_results", "sample_table"]

EXIT_REFUSED = 1  # at least one job was refused (authorization, state, validation, lost race)
EXIT_ERROR = 2  # bad input, store or policy problem, job not found
EXIT_UNCONFIRMED = 3  # several jobs selected and the operator did not confirm

SAMPLE = 5


def fail(message: str, code: int = EXIT_ERROR) -> NoReturn:
    """Print `error: message` on stderr and exit with `code`."""
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def build_filter(params: dict[str, Any], job_ids: tuple[str, ...], *, default_states: tuple[JobStatus, ...],
                 force_states: tuple[JobStatus, ...] = (), exclude_discarded: bool = False) -> JobFilter:
    """The JobFilter for the ids and filter options given (states default to what the command acts on)."""
    chosen = statuses(params.get("states") or ())
    flt = JobFilter(job_ids=tuple(job_ids), statuses=chosen, queue=params.get("queue") or (),
                    actor=params.get("actor") or (), error_class=params.get("error_class") or (),
                    older_than=params.get("older_than"),
                    exclude_discarded=exclude_discarded)
    if force_states:
        allowed = tuple(s for s in (chosen or force_states) if s in force_states)
        if not allowed:
            raise ConfigError(f"--state must be one of {', '.join(s.value for s in force_states)} here")
        return JobFilter(**{**flt.__dict__, "statuses": allowed})
    if not job_ids and not chosen:
        return JobFilter(**{**flt.__dict__, "statuses": default_states})
    return flt


def sample_table(jobs: list[Job], title: str) -> Table:
    """The first SAMPLE jobs of a selection, as a table."""
    table = Table(id_column(), "status", "queue", "actor", "attempt", "updated", title=title)
    for job in jobs[:SAMPLE]:
        table.add_row(job.job_id, job.status.value, job.queue, job.actor, str(job.attempt), fmt_time(job.updated_at))
    return table


def confirm_selection(command: str, jobs: list[Job], matched: int, params: dict[str, Any], console: Console,
             acting: int | None = None, *, ask: bool = True) -> None:
    """Show how many jobs match and a sample of `jobs`; unless --yes or --dry-run, ask to act on `acting`
    (default: all of `jobs`), or exit EXIT_UNCONFIRMED off a terminal."""
    limit = params["limit"]
    acting = len(jobs) if acting is None else acting
    console.print(f"[bold]{command}[/bold]: {matched} job(s) match"
                  + (f"; only the first {limit} (oldest change first) will be processed" if matched > limit else ""))
    print_table(console, sample_table(jobs, f"sample (first {min(SAMPLE, len(jobs))} of {acting})"))
    if params["dry_run"] or params["yes"] or not ask:
        return
    if sys.stdin.isatty():
        if not click.confirm(f"{command} {acting} job(s)?", err=True):
            fail("not confirmed; nothing was changed", EXIT_UNCONFIRMED)
        return
    fail(f"{acting} jobs selected: pass --yes to {command} them (or --dry-run to preview)", EXIT_UNCONFIRMED)


def has_filters(params: dict[str, Any]) -> bool:
    """Whether any filter option (queue, actor, state, error class, age) is given."""
    return any(params.get(k) for k in ("queue", "actor", "states", "error_class")) \
        or params.get("older_than") is not None


def render_results(command: str, results: list[dict[str, Any]], summary: dict[str, Any], matched: int,
            params: dict[str, Any], **extra: Any) -> None:
    """Print the results (CommandResult.as_dict() each, from the store or the API) and their summary."""
    if params["as_json"]:
        emit_json({"command": command, **extra, "matched": matched, "limit": params["limit"],
                   "dry_run": params["dry_run"], "summary": summary, "results": results})
    elif len(results) == 1:
        result = results[0]
        if result["outcome"] != "refused":
            click.echo(f"{command} {result['job_id']}: {result['message']}")
    else:
        if results:
            table = Table(id_column(), "before", "after", "outcome", "message", title=f"{command}: results")
            for r in results:
                table.add_row(r["job_id"], r.get("status_before") or "-", r.get("status") or "-", r["outcome"],
                              r["message"])
            print_table(stdout_console(), table)
        click.echo(", ".join(f"{k}: {v}" for k, v in summary.items()))
    for r in results:
        for warning in r.get("warnings") or ():
            click.echo(f"warning: {r['job_id']}: {warning}", err=True)
        if r["outcome"] == "refused" and len(results) == 1:
            click.echo(f"error: {r['message']}", err=True)
