"""Options and helpers shared by every `reliable` sub-command."""

from __future__ import annotations

import functools
import inspect
import json
import os
import sys
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table

from ..compat.rich_internals import plain_cells
from ..durations import parse_duration
from ..errors import ConfigError, ReliableError, TextTooLong
from ..inputs import MAX_TEXT, check_length
from ..isotime import format_time
from ..redact import redact_url
from ..states import JobStatus
from ..store import Reads, StateStore, selection
from ..store.db import check_store_url, missing_sqlite_file
from ..store.selection import CANDIDATES_SHOWN, MIN_PREFIX
from .env import ENV_API, ENV_BROKER_DELIVERY_LIMIT, ENV_BROKER_QUEUES, ENV_TOKEN, ENV_TOKEN_FILE

if TYPE_CHECKING:
    from .api_client import ApiClient

__all__ = [
    "BROKER_QUEUES_HELP",
    "CANDIDATES_SHOWN",
    "DURATION",
    "ENV_API",
    "ENV_BROKER_QUEUES",
    "ENV_TOKEN",
    "ENV_TOKEN_FILE",
    "JOB_ID_HELP",
    "MIN_PREFIX",
    "NO_STORE",
    "POSITIVE_DURATION",
    "STATE_CHOICE",
    "Duration",
    "api_option",
    "audited_options",
    "emit_json",
    "fmt_time",
    "handle_errors",
    "id_column",
    "job_id_argument",
    "open_source",
    "open_store",
    "print_table",
    "rabbitmq_broker",
    "repeat",
    "resolve_job_id",
    "resolve_job_ids",
    "run_audited",
    "source_options",
    "state_option",
    "stdout_console",
    "store_option",
    "token_file_option",
]

F = TypeVar("F", bound=Callable[..., Any])
R = TypeVar("R")

JOB_ID_HELP = (f"A job id may be cut to its first {MIN_PREFIX} or more characters when no other job's id starts "
               "with them (a trailing '...' is ignored).")

NO_STORE = ("no state store given: set RELIABLE_STORE=URL or pass --store URL, the store your workers use: "
            "postgresql+psycopg://USER@HOST/DB or sqlite:///PATH (a new one is created by `reliable db upgrade "
            "--store URL`)")

store_option = click.option(
    "--store", "store_url", envvar="RELIABLE_STORE", show_envvar=True, metavar="URL",
    help="State store URL (sqlite:///FILE or postgresql+psycopg://USER@HOST/DB). Required: there is no default.",
)


BROKER_QUEUES_HELP = (f" Quorum queues (reliable.rabbitmq.ReliableRabbitmqBroker): set ${ENV_BROKER_QUEUES}=quorum "
                      f"and ${ENV_BROKER_DELIVERY_LIMIT} as the workers' broker has them; several nodes: "
                      "';'-separated URLs.")

api_option = click.option(
    "--api", "api_url", envvar=ENV_API, show_envvar=True, metavar="URL",
    help=f"Go through the HTTP API of `reliable web` at URL (https://HOST/PREFIX) instead of the store: no "
         f"database credentials needed; the server decides who you are from the token (${ENV_TOKEN} or "
         "--token-file). Exclusive with --store.",
)
token_file_option = click.option(
    "--token-file", envvar=ENV_TOKEN_FILE, show_envvar=True, metavar="PATH",
    help=f"With --api: a file (readable by you only) whose first line is the API token; otherwise ${ENV_TOKEN}.",
)


def source_options(func: F) -> F:
    """--store, --api and --token-file: a command that reads or acts through the store or the HTTP API."""
    return store_option(api_option(token_file_option(func)))


def open_source(store_url: str | None, api_url: str | None, token_file: str | None) -> StateStore | ApiClient:
    """The one place that decides between the store and the HTTP API (`--api`).

    --store and --api on the command line together (or $RELIABLE_STORE and $RELIABLE_API both) are a
    usage error; one on the command line wins over the other from the environment. The API needs a
    token (`api_client.load_token`).
    """
    ctx = click.get_current_context(silent=True)
    if store_url and api_url:
        sources = {ctx.get_parameter_source(name) for name in ("store_url", "api_url")} if ctx else set()
        if len(sources) != 2:
            where = "the environment sets both RELIABLE_STORE and RELIABLE_API" \
                if sources == {click.core.ParameterSource.ENVIRONMENT} else "--store and --api are both given"
            raise click.UsageError(f"{where}: act through the store (database credentials) or through the API "
                                   "(a token), not both", ctx=ctx)
        if ctx is not None and ctx.get_parameter_source("store_url") is click.core.ParameterSource.COMMANDLINE:
            api_url = None
    if not api_url:
        return open_store(store_url)
    from .api_client import ApiClient, load_token

    return ApiClient(api_url, load_token(token_file))


def job_id_argument(name: str = "job_id", *, many: bool = False) -> Callable[[F], F]:
    """The JOB_ID argument (JOB_IDS: any number of them); the command's help says what a prefix does.

    The command resolves it with `resolve_job_id(s)` once its store is open.
    """

    def decorate(func: F) -> F:
        func.__doc__ = f"{inspect.cleandoc(func.__doc__ or '')}\n\n{JOB_ID_HELP}"
        return click.argument(name, nargs=-1 if many else 1)(func)

    return decorate


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


class HumanText(click.ParamType):  # type: ignore[type-arg]  # generic in recent click only
    """A text a person types (a reason): at most `limit` characters (reliable.inputs.check_length),
    else a usage error naming the option, before anything is opened."""

    name = "text"

    def __init__(self, limit: int = MAX_TEXT) -> None:
        self.limit = limit

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        """`value` as given; a usage error when it is too long."""
        try:
            check_length(param.name or "value" if param else "value", str(value), limit=self.limit)
        except TextTooLong as exc:
            self.fail(str(exc), param, ctx)
        return str(value)


#: The --reason of every command: at most MAX_TEXT characters.
REASON = HumanText()

def audited_options(policy_help: str, trail: str, *, api: bool = False) -> Callable[[F], F]:
    """--reason, --operator, --operators-file and --json of a command audited on its object (a queue, a
    worker process, a schedule): `policy_help` says what the operators policy must allow, `trail`
    whose audit trail records the reason; `api`: the command also runs through --api."""
    api_policy = " With --api the server's policy applies." if api else ""
    api_name = "; with --api the token's name" if api else ""
    from ..operators import ENV_OPERATOR

    def decorate(func: F) -> F:
        func = click.option("--json", "as_json", is_flag=True, help="Print JSON.")(func)
        func = click.option("--operators-file", type=click.Path(dir_okay=False), envvar="RELIABLE_OPERATORS_FILE",
                            show_envvar=True, help=f"Operators policy (YAML): {policy_help}{api_policy}")(func)
        func = click.option("--operator", "operator_name",
                            help=f"Who you are, for the audit trail [default: ${ENV_OPERATOR}, else your OS "
                                 f"user]{api_name}.")(func)
        return click.option("--reason", type=REASON, help=f"Why (required); recorded in {trail}.")(func)

    return decorate


def run_audited(source: Any, on_store: Callable[[StateStore], dict[str, Any]], api_path: str, reason: str | None, *,
                refusals: tuple[type[Exception], ...], statuses: tuple[int, ...], exit_code: int) -> dict[str, Any]:
    """Run a command audited on its object through `source` (`open_source`): `on_store(store)`, or POST
    `api_path` with the reason; its JSON-ready result. A refusal (`on_store` raising one of `refusals`,
    the API answering one of `statuses`) is printed on stderr and exits `exit_code`."""
    if isinstance(source, StateStore):
        try:
            return on_store(source)
        except refusals as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exit_code)
    from .api_client import ApiError

    with source:
        try:
            answer: dict[str, Any] = source.request("POST", api_path, body={"reason": reason})
            return answer
        except ApiError as exc:
            if exc.status not in statuses:
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(exit_code)


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


def open_store(url: str | None, *, create: bool = False) -> StateStore:
    """Open the store at `url` (connections are made on first use).

    No URL is a ConfigError saying how to give one: no command picks a database by itself. A
    SQLite file that does not exist is a ConfigError naming it, unless `create` (`db upgrade`):
    a read never leaves an empty database behind.
    """
    if not url:
        raise ConfigError(NO_STORE)
    parsed = check_store_url(url)
    if not create and (path := missing_sqlite_file(parsed)) is not None:
        raise ConfigError(f"store {redact_url(parsed)}: the SQLite file {path} does not exist (check --store / "
                          f"RELIABLE_STORE; a new store is created by `reliable db upgrade --store URL`)")
    return StateStore(url)


def resolve_job_id(store: Reads, given: str) -> str:
    """The job id `given` names (`reliable.store.selection.resolve_job_id`): a whole id, or a prefix of at
    least MIN_PREFIX characters of one id; a trailing "..." or "…" is ignored.

    No such job: JobNotFound; a prefix of several ids: a usage error (exit status 2) listing some of them.
    """
    try:
        return selection.resolve_job_id(store, given)
    except selection.AmbiguousJobId as exc:
        raise click.UsageError(str(exc), ctx=click.get_current_context(silent=True)) from None


def resolve_job_ids(store: Reads, given: Iterable[str]) -> tuple[str, ...]:
    """`resolve_job_id` of each of `given`, in order, each job once."""
    return tuple(dict.fromkeys(resolve_job_id(store, job_id) for job_id in given))


def fmt_time(epoch: float | None) -> str:
    """An epoch time in UTC, ISO 8601 with its zone (2026-12-03T12:08:10Z), or '-'."""
    return format_time(epoch) or "-"


def stdout_console() -> Console:
    """The console tables and job details print on: off a terminal (a pipe, a file) it never wraps a line."""
    console = Console()
    if not console.is_terminal:
        console.soft_wrap = True
    return console


def id_column(header: str = "job_id") -> Column:
    """A table column of ids: `print_table` prints them whole."""
    return Column(header, no_wrap=True)


def print_table(console: Console, table: Table) -> None:
    """Print `table` with nothing cut off: no_wrap columns (ids) stay whole and the others fold on a
    terminal; off a terminal every row is one line, however wide."""
    whole = 0
    for column in table.columns:
        # Cells are data (ids, checkpoints, error messages, reasons), never rich markup: "[/]" in a
        # checkpoint must print, not crash the table.
        plain_cells(column)
        if column.no_wrap:
            cells = [column.header, *column.cells]
            column.min_width = max(Measurement.get(console, console.options, cell).maximum for cell in cells)
            whole += column.min_width
        else:
            column.overflow = "fold"
            whole += 1
    if not console.is_terminal:
        wide = console.options.update_width(sys.maxsize)
        console.width = max(console.width, Measurement.get(console, wide, table).maximum)
    else:
        # A terminal too narrow for the whole ids (each column adds 3 of padding and border): wider
        # lines, which the terminal wraps, rather than cut ids.
        console.width = max(console.width, whole + 3 * len(table.columns) + 1)
    console.print(table)


def emit_json(value: Any, *, one_line: bool = False) -> None:
    """Print `value` as indented JSON, or on one line (a loop prints one object per line: JSON Lines)."""
    click.echo(json.dumps(value, indent=None if one_line else 2, default=str))


def repeat(step: Callable[[], R], show: Callable[[R], None], *, interval: float, once: bool) -> None:
    """A loop command's body (`recover`, `schedules run`): run `step`, `show` its result, wait `interval`.

    While the store is unreachable, say so on stderr and try again after `interval` (with `once`:
    the error ends the command).
    """
    from ..errors import StoreUnavailable

    while True:
        try:
            result = step()
        except StoreUnavailable as exc:
            if once:
                raise
            click.echo(f"store unavailable, retrying in {interval:g}s: {exc}", err=True)
            time.sleep(interval)
            continue
        show(result)
        if once:
            return
        time.sleep(interval)


def rabbitmq_broker(url: str) -> Any:
    """The broker a command publishes on, declaring queues as the application's workers do.

    Classic queues (Dramatiq's RabbitmqBroker) unless $RELIABLE_BROKER_QUEUES says "quorum": a
    queue's arguments must match its declaration exactly, or RabbitMQ refuses the publish.
    """
    kind = os.environ.get(ENV_BROKER_QUEUES, "classic").strip().lower()
    if kind not in ("classic", "quorum"):
        raise ConfigError(f"${ENV_BROKER_QUEUES} must be 'classic' or 'quorum', not {kind!r}")
    from ..rabbitmq.reach import parse_url

    parse_url(url)  # a URL pika cannot parse: one line with the fix (BrokerConfigError), not a traceback
    if kind == "classic":
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=url)  # Dramatiq takes ';'-separated URLs of several nodes
    from ..rabbitmq import ReliableRabbitmqBroker
    from ..rabbitmq.broker import DEFAULT_DELIVERY_LIMIT

    raw = os.environ.get(ENV_BROKER_DELIVERY_LIMIT, str(DEFAULT_DELIVERY_LIMIT))
    try:
        limit = int(raw)
    except ValueError:
        raise ConfigError(f"${ENV_BROKER_DELIVERY_LIMIT} must be an integer, not {raw!r}") from None
    return ReliableRabbitmqBroker(url=url, queue_type="quorum", delivery_limit=limit)
