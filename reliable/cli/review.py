"""`reliable review`: jobs waiting for a person (REVIEW): list, show, resolve."""

from __future__ import annotations

import click

from ..states import JobStatus
from ..store import StateStore
from ..store.selection import JobFilter
from .common import DURATION, handle_errors, job_id_argument, open_source, source_options
from .control import reconcile
from .views import api_list_view, list_view, show_any

__all__ = ["review"]

REVIEW = (JobStatus.REVIEW,)


@click.group(short_help="Jobs waiting for a person (REVIEW): list, show, resolve.")
def review() -> None:
    """Jobs in REVIEW: a side effect may or may not have happened (e.g. a non-idempotent call timed
    out, or the worker crashed in the middle). A person checks the downstream system, then resolves
    the job as succeeded or cancelled (`resolve`, an alias of `reliable reconcile`), or runs it again
    (`reliable restart`).
    """


@review.command("list")
@source_options
@click.option("--queue", multiple=True, help="Only jobs of this queue (repeatable: any of them).")
@click.option("--actor", multiple=True, help="Only jobs of this actor (repeatable: any of them).")
@click.option("--error-class", multiple=True, help="Only jobs whose last error has this class (repeatable).")
@click.option("--older-than", type=DURATION, help="Only jobs waiting for longer than this (1h30m, 90s, 2d or seconds).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {total, jobs: [...]}.")
@handle_errors
def list_(store_url: str | None, api_url: str | None, token_file: str | None, queue: tuple[str, ...],
          actor: tuple[str, ...], error_class: tuple[str, ...], older_than: float | None, limit: int,
          as_json: bool) -> None:
    """List jobs waiting for review, most recent first."""
    flt = JobFilter(statuses=REVIEW, queue=queue, actor=actor, error_class=error_class,
                    older_than=older_than)
    source = open_source(store_url, api_url, token_file)
    if isinstance(source, StateStore):
        list_view(source, flt, limit=limit, as_json=as_json, title="review")
        return
    with source:
        api_list_view(source, "review", flt, limit=limit, as_json=as_json, title="review")


@review.command()
@job_id_argument()
@source_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: job, attempts, last_error, checkpoint, effects, "
                                                      "events.")
@handle_errors
def show(job_id: str, store_url: str | None, api_url: str | None, token_file: str | None, as_json: bool) -> None:
    """Show a job: attempt history, last error, last checkpoint, side effects applied and events."""
    show_any(open_source(store_url, api_url, token_file), job_id, as_json=as_json)


# One implementation, two names: `reliable reconcile` is the command, `review resolve` its alias here.
review.add_command(reconcile, "resolve")
