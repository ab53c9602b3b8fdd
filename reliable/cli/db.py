"""`reliable db`: schema migrations and the PostgreSQL fencing floor."""

from __future__ import annotations

import click

from ..store import fencing, migrate
from .common import emit_json, handle_errors, open_store, store_option


@click.group()
def db() -> None:
    """Create or migrate the state store's schema; raise its fencing floor (PostgreSQL)."""


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
