"""Options and helpers shared by every `reliable` sub-command."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import click

from ..durations import parse_duration
from ..errors import ReliableError
from ..states import JobStatus
from ..store import StateStore

__all__ = [
    "DEFAULT_STORE", "DURATION", "POSITIVE_DURATION", "STATE_CHOICE", "Duration", "emit_json", "fmt_time",
    "handle_errors", "open_store", "state_option", "store_option",
]

DEFAULT_STORE = "sqlite:///reliable.db"
F = TypeVar("F", bound=Callable[..., Any])

store_option = click.option(
    "--store", "store_url", envvar="RELIABLE_STORE", default=DEFAULT_STORE, show_default=True,
    show_envvar=True, help="State store URL (sqlite:///FILE or postgresql+psycopg://USER@HOST/DB).",
)


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic in recent click only; pyproject allows 8.1
    """A time option in the one duration grammar (reliable.durations): 1h30m, 90s, 500ms or seconds."""

    name = "duration"

    def __init__(self, *, positive: bool = False) -> None:
        self.positive = positive

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        """Seconds in `value`; a usage error naming the option and showing the accepted forms otherwise."""
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        if self.positive and seconds <= 0:
            self.fail(f"bad duration {value!r}: expected more than zero", param, ctx)
        return seconds


#: Any duration (zero allowed), and one that must be longer than zero (an interval).
DURATION = Duration()
POSITIVE_DURATION = Duration(positive=True)


#: A job state, in any case (`running` is RUNNING).
STATE_CHOICE = click.Choice([s.value for s in JobStatus], case_sensitive=False)


def state_option(help_text: str) -> Callable[[F], F]:
    """`--state STATE` (repeatable, any case), passed as `states`: a tuple of state names in upper case.

    `--status`, its name in earlier versions, still works: hidden from --help, with a warning on stderr.
    """

    def decorate(func: F) -> F:
        @functools.wraps(func)
        def merged(*args: Any, **kwargs: Any) -> Any:
            old = kwargs.pop("deprecated_status")
            if old:
                click.echo("warning: --status is deprecated, use --state", err=True)
            kwargs["states"] = (*kwargs["states"], *old)
            return func(*args, **kwargs)

        with_old = click.option("--status", "deprecated_status", multiple=True, type=STATE_CHOICE, hidden=True)
        with_new = click.option("--state", "states", multiple=True, type=STATE_CHOICE, help=help_text)
        return with_new(with_old(merged))  # type: ignore[return-value]

    return decorate


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


def emit_json(value: Any, *, one_line: bool = False) -> None:
    """Print `value` as indented JSON, or on one line (a loop prints one object per line: JSON Lines)."""
    click.echo(json.dumps(value, indent=None if one_line else 2, default=str))
