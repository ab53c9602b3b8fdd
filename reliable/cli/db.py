"""`reliable db`: schema migrations."""

from __future__ import annotations

import click

from ..store import migrate
from .common import emit_json, handle_errors, open_store, store_option


@click.group()
def db() -> None:
    """Create or migrate the state store's schema."""


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
