"""Options and helpers shared by every `reliable` sub-command."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from ..errors import ReliableError
from ..store import StateStore

__all__ = ["DEFAULT_STORE", "emit_json", "fmt_time", "handle_errors", "open_store", "store_option"]

DEFAULT_STORE = "sqlite:///reliable.db"
F = TypeVar("F", bound=Callable[..., Any])

store_option = click.option(
    "--store", "store_url", envvar="RELIABLE_STORE", default=DEFAULT_STORE, show_default=True,
    show_envvar=True, help="State store URL (sqlite:///FILE or postgresql+psycopg://USER@HOST/DB).",
)


def handle_errors(func: F) -> F:
    """Turn a ReliableError into one line on stderr and exit status 2 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except ReliableError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def open_store(url: str) -> StateStore:
    """Open the store at `url` (connections are made on first use)."""
    return StateStore(url)


def fmt_time(epoch: float | None) -> str:
    """An epoch time as a short UTC ISO string, or '-'."""
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S")


def emit_json(value: Any) -> None:
    """Print `value` as indented JSON."""
    click.echo(json.dumps(value, indent=2, default=str))
