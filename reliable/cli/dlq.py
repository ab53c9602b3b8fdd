"""`reliable dlq`: the dead-letter queue (DEAD jobs) for people: list, show, requeue, discard (alias:
purge)."""

from __future__ import annotations

from typing import Any

import click

from ..states import JobStatus
from ..store import StateStore
from .common import DURATION, handle_errors, job_id_argument, open_source, source_options
from .control import (
    ALLOW_DUPLICATES,
    EXIT_CODES_HELP,
    allow_duplicates_option,
    control_options,
    filter_options,
    run_command,
)
from .views import api_list_view, list_view, show_any

__all__ = ["dlq"]

DEAD = (JobStatus.DEAD,)


@click.group(short_help="Dead-letter queue (DEAD jobs): list, show, requeue, discard (purge).")
def dlq() -> None:
    """The dead-letter queue: DEAD jobs (retries or budget exhausted, or a dead-letter error class).

    `list` and `show` to look, `requeue` to run them again from their last checkpoint, `discard`
    to take them out of the listing (they stay DEAD; the discard is recorded on the job). `purge`
    is an alias of `discard` (Sidekiq's and Oban's word for clearing dead jobs); the rows are
    deleted by retention (`reliable db prune --state DEAD`).
    """


@dlq.command("list")
@source_options
@click.option("--queue", multiple=True, help="Only jobs of this queue (repeatable: any of them).")
@click.option("--actor", multiple=True, help="Only jobs of this actor (repeatable: any of them).")
@click.option("--error-class", multiple=True, help="Only jobs whose last error has this class (repeatable).")
@click.option("--older-than", type=DURATION, help="Only jobs dead for longer than this (1h30m, 90s, 2d or seconds).")
@click.option("--include-discarded", is_flag=True, help="Also list jobs already discarded.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many rows.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {total, jobs: [...]}.")
@handle_errors
def list_(store_url: str | None, api_url: str | None, token_file: str | None, queue: tuple[str, ...],
          actor: tuple[str, ...], error_class: tuple[str, ...], older_than: float | None, include_discarded: bool,
          limit: int, as_json: bool) -> None:
    """List dead-lettered jobs, most recent first, with their last error."""
    from ..store.selection import JobFilter

    flt = JobFilter(statuses=DEAD, queue=queue, actor=actor, error_class=error_class,
                    older_than=older_than, exclude_discarded=not include_discarded)
    source = open_source(store_url, api_url, token_file)
    if isinstance(source, StateStore):
        list_view(source, flt, limit=limit, as_json=as_json, title="dead letters")
        return
    if include_discarded:
        raise click.UsageError("--include-discarded is not available through --api: the API lists the dead "
                               "letters not discarded")
    with source:
        api_list_view(source, "dlq", flt, limit=limit, as_json=as_json, title="dead letters")


@dlq.command()
@job_id_argument()
@source_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: job, attempts, last_error, checkpoint, effects, "
                                                      "events.")
@handle_errors
def show(job_id: str, store_url: str | None, api_url: str | None, token_file: str | None, as_json: bool) -> None:
    """Show a job: attempt history, last error, last checkpoint, side effects and events."""
    show_any(open_source(store_url, api_url, token_file), job_id, as_json=as_json)


@dlq.command(epilog=EXIT_CODES_HELP)
@job_id_argument("job_ids", many=True)
@filter_options
@control_options
@allow_duplicates_option
def requeue(job_ids: tuple[str, ...], **params: Any) -> None:
    """Run dead jobs again from their last checkpoint (fresh retry budget).

    Give job ids, or filters (--queue, --actor, --error-class, --older-than) to select DEAD jobs.
    Needs --reason; several jobs also need --yes. Use --rate to spare downstream services.

    A job whose actor is not idempotent is refused unless --allow-duplicate-side-effects: its side
    effect may already have happened. Check the downstream system first (pass --policies so the
    policy's queue and actor sections count).
    """
    allow = params.pop(ALLOW_DUPLICATES)
    run_command("requeue", job_ids, params, force_states=DEAD if not job_ids else (), exclude_discarded=not job_ids,
                **{ALLOW_DUPLICATES: allow})


@dlq.command(epilog=EXIT_CODES_HELP)
@job_id_argument("job_ids", many=True)
@filter_options
@control_options
def discard(job_ids: tuple[str, ...], **params: Any) -> None:
    """Take dead jobs out of the dead-letter listing.

    The job stays DEAD (its history is kept); a `discarded` event with your name and reason is
    recorded and `dlq list` no longer shows it (`--include-discarded` does). If the job is later
    requeued and dies again it reappears.
    """
    run_command("discard", job_ids, params, force_states=DEAD if not job_ids else (), exclude_discarded=True)


dlq.add_command(discard, "purge")  # an alias (operators.SYNONYMS): the same command
