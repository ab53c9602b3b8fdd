"""`reliable db`: schema migrations."""

from __future__ import annotations

import click

from ..store import migrate
from .common import handle_errors, open_store, store_option


@click.group()
def db() -> None:
    """Create or migrate the state store's schema."""


@db.command()
@store_option
@handle_errors
def upgrade(store_url: str) -> None:
    """Apply every pending migration (safe to run again: it does nothing when up to date).

    A SQLite store's file is created here, and only here.
    """
    store = open_store(store_url, create=True)
    before, after = store.upgrade()
    if before == after:
        click.echo(f"{store.url}: already at revision {after}")
    else:
        click.echo(f"{store.url}: migrated {before or 'empty'} -> {after}")


@db.command()
@store_option
@handle_errors
def current(store_url: str) -> None:
    """Print the schema revision of the store and the newest one this version knows."""
    store = open_store(store_url)
    click.echo(f"current: {migrate.current_revision(store.engine) or 'none'}")
    click.echo(f"head:    {migrate.head_revision()}")
