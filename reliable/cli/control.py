"""`reliable pause|stop|cancel|resume|restart|retry|reconcile`: operator commands on jobs.

Thin over `reliable.control.Control`: this module selects jobs, asks for confirmation, shows
progress and renders results.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..bulk import BulkReport
from ..control import RESOLUTIONS, CommandResult, ContractSource, Control, command_states, require_reason
from ..errors import ConfigError, ControlRefused, ReasonRequired, ReliableError
from ..operators import ENV_OPERATOR, Operator, OperatorsPolicy
from ..states import JobStatus
from ..store import Job, StateStore
from ..store.selection import count_jobs, select_jobs
from .common import (
    BROKER_QUEUES_HELP,
    DURATION,
    REASON,
    emit_json,
    job_id_argument,
    open_source,
    rabbitmq_broker,
    resolve_job_ids,
    source_options,
    state_option,
)
from .job_commands import (
    EXIT_ERROR,
    EXIT_REFUSED,
    EXIT_UNCONFIRMED,
    build_filter,
    confirm_selection,
    fail,
    has_filters,
    render_results,
)
from .views import STORE_READER

__all__ = [
    "ALLOW_DUPLICATES", "EXIT_ERROR", "EXIT_REFUSED", "EXIT_UNCONFIRMED", "allow_duplicates_option", "cancel",
    "control_options", "filter_options", "load_policy", "pause", "reconcile", "requeue", "restart", "resume",
    "run_command", "stop",
]

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_LIMIT = 100
ENV_OPERATORS_FILE = "RELIABLE_OPERATORS_FILE"

EXIT_CODES_HELP = (
    "Exit status: 0 done; 1 refused for at least one job (not authorized, wrong state, failed "
    "validation, lost a race; each refusal is recorded on the job as `command_refused`); 2 bad input, "
    "such as a missing --reason (every command that changes jobs needs one; nothing is written), or a "
    "store error; 3 several jobs selected without --yes."
)


def filter_options(func: F) -> F:
    """--queue, --actor, --state, --error-class, --older-than."""
    options = [
        click.option("--queue", multiple=True, help="Only jobs of this queue (repeatable: any of them)."),
        click.option("--actor", multiple=True, help="Only jobs of this actor (repeatable: any of them)."),
        state_option("Only jobs in this state (repeatable, any case). Default for a filter: the states the "
                     "command applies to."),
        click.option("--error-class", multiple=True,
                     help="Only jobs whose last error has this class (e.g. transient; repeatable)."),
        click.option("--older-than", type=DURATION,
                     help="Only jobs whose state last changed longer ago than this (1h30m, 90s, 2d or seconds)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def control_options(func: F) -> F:
    """The options every operator command takes (store, identity, authorization, bulk safety, output)."""
    options = [
        source_options,
        click.option("--reason", type=REASON,
                     help="Why you are doing this (required, also with --dry-run); recorded on every job the "
                          "command changes."),
        click.option("--operator", "operator_name",
                     help=f"Who you are, for the audit trail [default: ${ENV_OPERATOR}, else your OS user]."),
        click.option("--operators-file", type=click.Path(dir_okay=False), envvar=ENV_OPERATORS_FILE, show_envvar=True,
                     help="Operators policy (YAML) authorizing commands per identity and queue (without one every "
                          "command is allowed)."),
        click.option("--policies", "policies_path", envvar="RELIABLE_POLICIES", show_envvar=True,
                     type=click.Path(exists=True),
                     help="Policy file or directory (job contracts: resumable, checkpoint_schema, compensation, "
                                  "idempotent)."),
        click.option("--broker", "broker_url", envvar="RELIABLE_BROKER", show_envvar=True,
                     help="RabbitMQ URL (amqp://...): publish resumed/requeued jobs and compensations now. "
                          "Without it the workers' sweeper publishes them." + BROKER_QUEUES_HELP),
        click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation when several jobs are selected."),
        click.option("--dry-run", is_flag=True, help="Show what would happen; change nothing, record nothing."),
        click.option("--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
                     help="Act on at most this many jobs (oldest change first)."),
        click.option("--rate", type=click.FloatRange(min=0, min_open=True),
                     help="At most this many jobs per second (spares downstream services in a mass replay)."),
        click.option("--json", "as_json", is_flag=True, help="Print the results as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


ALLOW_DUPLICATES = "allow_duplicate_side_effects"

#: `retry`, `restart` / `dlq requeue` of a job whose actor is not idempotent (see Control.requeue).
allow_duplicates_option = click.option(
    "--allow-duplicate-side-effects", ALLOW_DUPLICATES, is_flag=True,
    help="Also run jobs whose actor is not idempotent (idempotent: false). Their side effect may already have "
         "happened and may happen again, so without this flag they are refused: check the downstream system first.")


def load_policy(path: str | None) -> ContractSource | None:
    if not path:
        return None
    try:
        from ..policy import Policy
    except ImportError as exc:
        raise ConfigError(f"--policies given but reliable.policy cannot be imported: {exc}") from None
    policy: ContractSource = Policy.load(path)
    return policy


def _operators(path: str | None) -> OperatorsPolicy | None:
    return OperatorsPolicy.load(path) if path else None


def build_control(store: StateStore, params: dict[str, Any]) -> Control:
    """A Control from the CLI options (identity, operators policy, contracts policy, broker)."""
    broker = None
    if params.get("broker_url"):
        broker = rabbitmq_broker(url=params["broker_url"])
    return Control(store, policy=load_policy(params.get("policies_path")), broker=broker,
                   operators=_operators(params.get("operators_file")),
                   identity=Operator.resolve(params.get("operator_name")))


def run_command(command: str, job_ids: tuple[str, ...], params: dict[str, Any], *, force_states: tuple[JobStatus, ...]
                = (), exclude_discarded: bool = False, **kwargs: Any) -> None:
    """Select jobs, confirm when several, run `command` on each and report; exits with EXIT_* codes.

    A missing --reason is a usage error (exit 2) found before the store is opened: nothing is written.
    """
    try:
        require_reason(command, params.get("reason"))
    except ReasonRequired:
        raise click.UsageError("--reason is required: say why (it is recorded on every job the command changes); "
                               "nothing was done") from None
    try:
        _run(command, job_ids, params, force_states=force_states, exclude_discarded=exclude_discarded, **kwargs)
    except ReliableError as exc:
        fail(str(exc), EXIT_REFUSED if isinstance(exc, ControlRefused) else EXIT_ERROR)


def _run(command: str, job_ids: tuple[str, ...], params: dict[str, Any], *, force_states: tuple[JobStatus, ...],
         exclude_discarded: bool, **kwargs: Any) -> None:
    if not job_ids and not has_filters(params) and not force_states:
        raise ConfigError("give job ids or at least one filter (--queue, --actor, --state, --error-class, "
                          "--older-than)")
    source = open_source(params["store_url"], params["api_url"], params["token_file"])
    if not isinstance(source, StateStore):
        from .via_api import run_command as run_via_api

        with source:
            run_via_api(source, command, job_ids, params, force_states=force_states,
                     exclude_discarded=exclude_discarded, **kwargs)
        return
    store = source
    job_ids = resolve_job_ids(store, job_ids)
    flt = build_filter(params, job_ids, default_states=command_states(command), force_states=force_states,
                       exclude_discarded=exclude_discarded)
    control = build_control(store, params)
    reason: str | None = params.get("reason")
    limit: int = params["limit"]
    as_json: bool = params["as_json"]
    err = Console(stderr=True)
    if len(job_ids) == 1 and not has_filters(params):
        jobs = [store.get(job_ids[0])]
        matched = 1
    else:
        matched = count_jobs(store, flt, reader=STORE_READER)
        jobs = select_jobs(store, flt, reader=STORE_READER, limit=limit)
        if not jobs:
            if as_json:
                emit_json({"command": command, "matched": 0, "dry_run": params["dry_run"], "summary": {},
                           "results": []})
            else:
                err.print(f"{command}: no job matches")
            return
        if len(jobs) > 1:
            confirm_selection(command, jobs, matched, params, err)
    report = _execute(control, command, jobs, params, reason, err, **kwargs)
    render_results(command, [r.as_dict() for r in report.results], report.summary(), matched, params)
    if control.broker is not None:
        control.broker.close()
    if report.refused:
        sys.exit(EXIT_REFUSED)


def _execute(control: Control, command: str, jobs: list[Job], params: dict[str, Any], reason: str | None,
             err: Console, **kwargs: Any) -> BulkReport:
    common: dict[str, Any] = {"reason": reason, "limit": params["limit"], "dry_run": params["dry_run"],
                              "rate": params.get("rate")}
    if len(jobs) <= 1:
        return control.run_bulk(command, jobs, **common, **kwargs)
    with Progress(TextColumn(f"{command}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True) as bar:
        task = bar.add_task(command, total=len(jobs))

        def progress(done: int, total: int, result: CommandResult) -> None:
            bar.update(task, completed=done)

        return control.run_bulk(command, jobs, progress=progress, **common, **kwargs)


def _command(name: str, short: str, body: str, *, view: tuple[JobStatus, ...] = ()) -> Callable[[F], click.Command]:
    """A control command; with `view`, a call without job ids selects jobs in those states (filters narrow them)."""

    def decorate(func: F) -> click.Command:
        @functools.wraps(func)
        def wrapper(**params: Any) -> None:
            job_ids = params.pop("job_ids")
            extra = func(params)
            run_command(name, job_ids, params,
                        force_states=view if not job_ids else (), **(extra or {}))

        wrapper.__doc__ = f"{short}\n\n{body}\n\n{EXIT_CODES_HELP}"
        cmd = click.command(name, short_help=short)(
            job_id_argument("job_ids", many=True)(filter_options(control_options(wrapper))))
        return cmd

    return decorate


@_command("pause", "Pause jobs (running ones at their next checkpoint).", """\
PENDING and RETRY_WAIT jobs move to PAUSED at once. A RUNNING job is flagged (pause_requested);
its worker sees the flag at the next checkpoint or heartbeat, finishes the current unit, checkpoints
and moves the job to PAUSED. Nothing is dispatched for a paused job until `reliable resume`.

\b
Examples:
  reliable pause 3f2a9c1e --reason "downstream maintenance"
  reliable pause --queue exports --state RUNNING --yes --reason "db failover\"""")
def pause(params: dict[str, Any]) -> None:
    return None


@_command("stop", "Stop jobs (running ones after their current unit).", """\
PENDING, RETRY_WAIT and PAUSED jobs move to STOPPED at once. A RUNNING job moves to STOPPING: its
worker finishes the unit, checkpoints and moves it to STOPPED. Past the job's stop grace period the
worker's heartbeat records an `escalation` event and terminates the job's thread (force_stop); a
worker that died while stopping is finished by the recovery loop (force_stop).
A STOPPED job can be resumed (`reliable resume`) or restarted.

\b
Example:
  reliable stop 3f2a9c1e --reason "runaway export, ticket OPS-12\"""")
def stop(params: dict[str, Any]) -> None:
    return None


@_command("cancel", "Cancel jobs; runs the compensation actor if side effects were applied.", """\
PENDING, RETRY_WAIT, PAUSED and STOPPED jobs move to CANCELLED at once. A RUNNING (or STOPPING) job
is flagged cancel_requested: its worker stops after the current unit and ends CANCELLED.

If the job already applied side effects and its contract declares a compensation actor, the
compensation runs (enqueued with --broker, otherwise recorded as `compensation_pending`; for a
running job its worker enqueues it). Without a compensation the output and the job's events say
that partial side effects remain: nothing is rolled back.

\b
Example:
  reliable cancel 3f2a9c1e --reason "customer withdrew the request" --broker amqp://guest:guest@localhost/""")
def cancel(params: dict[str, Any]) -> None:
    return None


@_command("resume", "Resume PAUSED or STOPPED jobs from their last checkpoint.", """\
The job keeps its job_id and checkpoint and goes back to PENDING; the worker that claims it issues
a new attempt and lease, and the attempt history is kept. Refused when the actor is not resumable
(use `reliable restart`), when the job's checkpoint schema differs from the actor's current
checkpoint_schema, or when the actor's resume validator (option resume_validator="module:function")
refuses. Two operators resuming the same job at once: exactly one wins, the other is refused.

\b
Examples:
  reliable resume 3f2a9c1e --policies policies/ --reason "maintenance over"
  reliable resume --queue exports --state PAUSED --rate 5 --yes --reason "maintenance over\"""")
def resume(params: dict[str, Any]) -> None:
    return None


def _retry_extra(params: dict[str, Any]) -> dict[str, Any]:
    return {ALLOW_DUPLICATES: params.pop(ALLOW_DUPLICATES)}


restart = allow_duplicates_option(_command("restart", "Run jobs again from the beginning (checkpoint cleared).", """\
FAILED, DEAD, REVIEW, STOPPED and CANCELLED jobs go back to PENDING with no checkpoint and a fresh
retry budget (checkpoint_version keeps counting up). Side effects already applied are not undone.

A job whose actor is not idempotent and that has run at least once is refused, as for `retry`: its
side effect may already have happened. Check the downstream system (for a REVIEW job, `reliable
reconcile` records what you found); only if the effect did not happen, pass
--allow-duplicate-side-effects.

\b
Example:
  reliable restart 3f2a9c1e --reason "input file fixed\"""")(_retry_extra))


requeue = allow_duplicates_option(_command("requeue", "Requeue FAILED or DEAD jobs from their last checkpoint.", """\
The job goes back to PENDING with a fresh retry budget and keeps its checkpoint (refused when the
checkpoint's schema no longer matches the actor: use `reliable restart`). Use --rate to spare
downstream services in a bulk requeue. `reliable retry` and `reliable dlq requeue` are the same command
(retry: its old name, kept as an alias).

A job whose actor is not idempotent (idempotent: false in its actor options or the policy: pass
--policies) is refused: its side effect (a charge, an email) may already have happened. Check the
downstream system; only if the effect did not happen, pass --allow-duplicate-side-effects.

\b
Examples:
  reliable requeue 3f2a9c1e --reason "provider fixed the outage"
  reliable requeue --queue billing --error-class transient --older-than 1h --rate 10 --yes --reason "API back\"""")(
    _retry_extra))


def _reconcile_extra(params: dict[str, Any]) -> dict[str, Any]:
    return {"resolution": params.pop("resolution").lower()}


def _with_resolution(cmd: click.Command) -> click.Command:
    cmd.params.insert(1, click.Option(["--as", "resolution"], required=True,
                                      type=click.Choice(RESOLUTIONS, case_sensitive=False),
                                      help="How the job really ended, as a person checked."))
    return cmd


reconcile = _with_resolution(_command(
    "reconcile", "Resolve REVIEW jobs as succeeded or cancelled. Needs --as.", """\
A REVIEW job hit a side effect whose outcome is unknown (e.g. a non-idempotent call timed out).
Check the downstream system, then record what really happened: --as succeeded or --as cancelled.
No compensation is run by reconcile. Without job ids it selects REVIEW jobs (all of them, or those
the filters pick; several need --yes). `reliable review resolve` is an alias of this command.

\b
Examples:
  reliable reconcile 3f2a9c1e --as succeeded --reason "payment found in the PSP dashboard"
  reliable review resolve --queue billing --as cancelled --yes --reason "refunded by hand\"""",
    view=(JobStatus.REVIEW,))(_reconcile_extra))
