"""`reliable db`: schema migrations, the PostgreSQL fencing floor, and retention (`prune`)."""

from __future__ import annotations

import sys

import click

from ..durations import format_duration
from ..store import StateStore, fencing, migrate
from .common import (
    POSITIVE_DURATION,
    REASON,
    STATE_CHOICE,
    emit_json,
    fmt_time,
    handle_errors,
    open_store,
    store_option,
)


@click.group()
def db() -> None:
    """Create or migrate the store's schema; raise its fencing floor (PostgreSQL); prune old history."""


@db.command()
@store_option
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {store, before, after, applied: [{revision, description}]}.")
@handle_errors
def upgrade(store_url: str, as_json: bool) -> None:
    """Apply every pending migration (safe to run again: it does nothing when up to date).

    Prints each migration applied, oldest first. A SQLite store's file is created here, and only here.
    """
    store = open_store(store_url, create=True)
    before, after = store.upgrade()
    applied = migrate.applied_between(before, after)
    if as_json:
        emit_json({"store": store.url, "before": before, "after": after,
                   "applied": [{"revision": revision, "description": text} for revision, text in applied]})
        return
    if before == after:
        click.echo(f"{store.url}: already at revision {after}")
        return
    for revision, text in applied:
        click.echo(f"applied {revision}: {text}")
    click.echo(f"{store.url}: migrated {before or 'empty'} -> {after}")


@db.command()
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {store, current, head, up_to_date}.")
@handle_errors
def current(store_url: str, as_json: bool) -> None:
    """Print the schema revision of the store and the newest one this version knows."""
    store = open_store(store_url)
    revision = migrate.current_revision(store.engine)
    head = migrate.head_revision()
    if as_json:
        emit_json({"store": store.url, "current": revision, "head": head, "up_to_date": revision == head})
        return
    click.echo(f"current: {revision or 'none'}")
    click.echo(f"head:    {head}")


@db.command("raise-lease-floor")
@store_option
@click.option("--above-timeline", type=click.IntRange(min=1), required=True,
              help="The highest WAL timeline any server of this store ever ran on (before pg_upgrade, or on a "
                   "server lost in a failover).")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {store, database, timeline, before, after, lowest_next_token}.")
@handle_errors
def raise_lease_floor(store_url: str, above_timeline: int, as_json: bool) -> None:
    """Raise the PostgreSQL store's fencing floor above every token issued so far; restart workers after.

    Needed after pg_upgrade or a move to a new cluster (the WAL timeline starts again at 1), or after
    promoting a standby that did not follow every earlier timeline (`reliable docs postgresql-failover`).
    """
    store = open_store(store_url)
    floor = fencing.raise_lease_floor(store.engine, above_timeline)
    if as_json:
        emit_json({"store": store.url, "database": floor.database, "timeline": floor.timeline,
                   "before": floor.before, "after": floor.after, "lowest_next_token": floor.lowest_next_token})
        return
    click.echo(f"{store.url}: lease floor {floor.before} -> {floor.after}; the next claims take tokens from "
               f"{floor.lowest_next_token} (timeline {floor.timeline}) once the workers restart")


@db.command()
@store_option
@click.option("--older-than", "older_than", type=POSITIVE_DURATION, required=True, metavar="DURATION",
              help="Delete what finished longer ago than this (30d, 12h, 1w2d), by the store's clock.")
@click.option("--state", "states", multiple=True, type=STATE_CHOICE,
              help="Only jobs in this terminal state (repeatable) [default: SUCCEEDED, FAILED, CANCELLED, DEAD].")
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation (cron).")
@click.option("--batch-size", type=click.IntRange(min=1), default=1000, show_default=True,
              help="Jobs per batch: a worker writing to the store waits for one batch at most.")
@click.option("--operator", "operator_name", help="Who you are, for the audit record [default: $RELIABLE_OPERATOR, "
                                                  "else your OS user].")
@click.option("--reason", type=REASON, default="retention", show_default=True, help="Why, for the audit record.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {store, cut, dry_run, counted, deleted, seconds, rows_per_second, longest_batch, "
                   "operation_id}.")
@handle_errors
def prune(store_url: str, older_than: float, states: tuple[str, ...], dry_run: bool, yes: bool, batch_size: int,
          operator_name: str | None, reason: str, as_json: bool) -> None:
    """Delete finished jobs (with their events, attempts and effects), ended workflows and ended bulk
    operations older than --older-than, in small batches that workers do not wait on.

    Never a job that is not in a terminal state, never a node of a workflow that is live or ended
    after the cut. Prints the count first; asks before deleting unless --yes. Each run leaves an audit
    record among the bulk operations (command `prune`). From cron:
    `reliable db prune --older-than 30d --yes`.
    """
    store = open_store(store_url)
    try:
        _prune(store, older_than, states, dry_run=dry_run, yes=yes, batch_size=batch_size,
               operator_name=operator_name, reason=reason, as_json=as_json)
    finally:
        store.close()


def _prune(store: StateStore, older_than: float, states: tuple[str, ...], *, dry_run: bool, yes: bool,
           batch_size: int, operator_name: str | None, reason: str, as_json: bool) -> None:
    from ..operators import Operator
    from ..store import retention

    cut = store.now() - older_than
    counted = retention.count_prunable(store, cut, states=states)
    summary = (f"{counted.jobs} jobs finished before {fmt_time(cut)} ({format_duration(older_than)} ago) with "
               f"{counted.events} events, {counted.attempts} attempts, {counted.effects} effects; "
               f"{counted.workflows} workflows; {counted.operations} bulk operations")
    if dry_run or counted.rows == 0:
        if as_json:
            emit_json({"store": store.url, "cut": cut, "dry_run": dry_run, "counted": counted.as_dict(),
                       "deleted": None})
        else:
            click.echo(f"{'would delete' if dry_run else 'nothing to delete:'} {summary}")
        return
    if not as_json:
        click.echo(f"to delete: {summary}")
    if not yes:
        if not sys.stdin.isatty():
            raise click.UsageError("not a terminal: pass --yes to delete without confirmation (or --dry-run)")
        click.confirm("delete them?", abort=True)
    operator = Operator.resolve(operator_name)
    result = retention.prune(store, cut, states=states, batch_size=batch_size, operator=operator.name,
                             reason=reason, planned=counted)
    if as_json:
        emit_json({"store": store.url, "cut": cut, "dry_run": False, "counted": counted.as_dict(),
                   "deleted": result.counts.as_dict(), "seconds": result.seconds,
                   "rows_per_second": result.rows_per_second, "longest_batch": result.longest_batch,
                   "operation_id": result.operation_id})
        return
    deleted = result.counts
    click.echo(f"deleted {deleted.jobs} jobs, {deleted.events} events, {deleted.attempts} attempts, "
               f"{deleted.effects} effects, {deleted.workflows} workflows, {deleted.operations} bulk operations "
               f"({deleted.rows} rows in {result.seconds:.1f}s, {result.rows_per_second:.0f} rows/s, "
               f"{result.batches} batches, the longest {result.longest_batch * 1000:.0f} ms); "
               f"audit record: operation {result.operation_id}")
