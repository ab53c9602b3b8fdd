"""`reliable policy`: validate policy files and explain what a failure would become."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import click
import dramatiq
from rich.console import Console
from rich.table import Table

from ..errors import ConfigError
from ..policy import Decision, Failure, JobContract, Policy, format_duration
from ..policy.ambiguity import DeclaredActor
from ..policy.check import CheckResult, check_path, resolve_exception
from ..policy.matching import normalize_exception_path
from .app import app_policy, cwd_on_path, declared_actors, load_app
from .common import emit_json, handle_errors, print_table

__all__ = ["policy", "synthetic_exception"]

_TOP = 1.0 - 1e-12  # the largest jitter draw (rand() is in [0, 1))


class _FakeResponse:
    """Just enough of an HTTP response for matching: a status code and headers."""

    def __init__(self, status_code: int | None, headers: dict[str, str]) -> None:
        self.status_code = status_code
        self.headers = headers


def synthetic_exception(path: str, *, message: str = "", status: int | None = None,
                        retry_after: str | None = None) -> tuple[BaseException, str | None]:
    """An instance of (a stand-in for) the exception class at `path`, carrying status and Retry-After.

    When the class can be imported the stand-in subclasses it, so subclass rules match; otherwise it
    only carries the dotted name, and the second item says why the import failed.
    """
    path = normalize_exception_path(path)
    module, _, qualname = path.rpartition(".")
    base: type[BaseException] = Exception
    note = None
    try:
        base = resolve_exception(path)
    except ValueError as error:
        note = f"{error}; matching by name only"
    namespace = {"__module__": module, "__qualname__": qualname, "__str__": lambda self: message}
    cls: type[BaseException]
    try:
        cls = type(qualname.rsplit(".", 1)[-1], (base,), namespace)
    except TypeError:
        cls, note = type(qualname.rsplit(".", 1)[-1], (Exception,), namespace), f"cannot subclass {path}"
    instance = cls.__new__(cls)
    instance.args = (message,)
    headers = {"Retry-After": retry_after} if retry_after is not None else {}
    for name, value in (("response", _FakeResponse(status, headers)), ("status_code", status),
                        ("retry_after", retry_after)):
        if value is None:
            continue
        with contextlib.suppress(AttributeError, TypeError):  # a read-only attribute of the real class
            setattr(instance, name, value)
    return instance, note


@click.group()
def policy() -> None:
    """Validate policy files and explain what a failure would become."""


APP_HELP = ("Import MODULE (or MODULE:BROKER) so the app's actors register on its broker; their declared "
            "options (idempotent, max_retries...) shape each actor's contract.")


@policy.command()
@click.argument("path", required=False, type=click.Path())
@click.option("--app", "app_spec", metavar="MODULE[:BROKER]",
              help=APP_HELP + " Sections naming no actor or queue of the app are then errors, and warnings cover "
                              "its actors too.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {ok, summary, rules, builtin_rules, inherits, actors, queues, app_actors, lanes, "
                   "problems: [{path, line, field, message}], warnings: [{where, message}]}.")
@handle_errors
def check(path: str | None, app_spec: str | None, as_json: bool) -> None:
    """Validate the policy file or directory PATH strictly (exception paths must import).

    Without PATH, the built-in policy. Files extend the built-in policy unless one says
    `inherit: false`. Prints "OK: N user rules + M built-in rules, K actors" (and says when the
    built-in rules are dropped), or one line per problem (file:line: field: message) and exits 2.
    With --app, an `actors:` or `queues:` section naming no actor or queue of the app is a problem
    too (the closest declared name offered). A rule that would retry a non-idempotent job after an
    ambiguous error (a read timeout...) is a warning on stderr naming its file:line; warnings do
    not change the exit status.
    """
    cwd_on_path()
    broker = load_app(app_spec) if app_spec else None
    actors = declared_actors(broker) if broker is not None else []
    queues = sorted(broker.get_declared_queues()) if broker is not None else []
    result = check_path(path, actors=actors, queues=queues)
    app_actors = len(actors) if app_spec else None
    if as_json:
        emit_json({"ok": result.ok, "summary": _summary(result, path, app_actors) if result.ok else None,
                   "rules": result.rules, "builtin_rules": result.builtin_rules, "inherits": result.inherits,
                   "actors": result.actors, "queues": result.queues, "app_actors": app_actors,
                   "lanes": list(result.policy.lanes) if result.policy is not None else [],
                   "problems": [asdict(problem) for problem in result.problems],
                   "warnings": [asdict(warning) for warning in result.warnings]})
        if not result.ok:
            sys.exit(2)
        return
    if not result.ok:
        for problem in result.problems:
            click.echo(str(problem), err=True)
        sys.exit(2)
    for warning in result.warnings:
        click.echo(str(warning), err=True)
    click.echo(_summary(result, path, app_actors))


def _summary(result: CheckResult, path: str | None, app_actors: int | None) -> str:
    if path is None:
        rules = f"the built-in policy, {result.builtin_rules} rules"
    elif result.inherits:
        rules = f"{result.rules} user rules + {result.builtin_rules} built-in rules"
    else:
        rules = f"{result.rules} user rules (built-in rules dropped: inherit: false)"
    extra = "" if app_actors is None else f", {app_actors} app actors"
    warned = f"; {len(result.warnings)} warning(s)" if result.warnings else ""
    lanes = result.policy.lanes if result.policy is not None else ()
    routed = f"; retries routed to queue(s): {', '.join(lanes)}" if lanes else ""
    return f"OK: {rules}, {result.actors} actors{extra}{routed}{warned}"


@policy.command()
@click.argument("path", required=False, type=click.Path())
@click.option("--app", "app_spec", metavar="MODULE[:BROKER]",
              help=APP_HELP + " Without PATH, the policy the app installed reliable with is used.")
@click.option("--exception", "exception_path",
              help="Dotted exception class, e.g. httpx.HTTPStatusError. Without it, --app lists the actors' "
                   "contracts.")
@click.option("--status", type=click.IntRange(100, 599), help="HTTP status the exception carries.")
@click.option("--message", default="", help="The exception's message.")
@click.option("--actor", default="", help="Actor name (its actor section, rules and, with --app, options apply).")
@click.option("--queue", help="Queue name (its queue section and rules apply) [default: the actor's queue with "
                              "--app, else 'default'].")
@click.option("--retry-after", help="A Retry-After value: seconds or an HTTP date.")
@click.option("--attempt", type=click.IntRange(1), default=1, show_default=True, help="The attempt that failed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def explain(path: str | None, app_spec: str | None, exception_path: str | None, status: int | None, message: str,
            actor: str, queue: str | None, retry_after: str | None, attempt: int, as_json: bool) -> None:
    """Show which rule of the policy at PATH matches an exception, and what would happen.

    Without PATH: the built-in policy (or, with --app, the policy the app installed). With --app and
    no --actor, one line per actor of the app; without --exception, each actor's contract.
    """
    cwd_on_path()
    broker = load_app(app_spec) if app_spec else None
    loaded = _policy(path, broker)
    actors = declared_actors(broker) if broker is not None else []
    if actor and broker is not None:
        actors = [a for a in actors if a.name == actor]
        if not actors:
            raise ConfigError(f"--app {app_spec}: no actor {actor!r} is declared on its broker")
    if exception_path is None:
        if broker is None:
            raise ConfigError("give --exception (what failed), or --app MODULE to list your actors' contracts")
        _contracts(loaded, actors, as_json)
        return
    exc, note = synthetic_exception(exception_path, message=message, status=status, retry_after=retry_after)
    if broker is not None and not actor:
        _per_actor(loaded, actors, exc, note, queue, attempt, as_json)
        return
    options = actors[0].options if actors else {}
    queue = queue or (actors[0].queue if actors else "default")
    _explain_one(loaded, exc, note, actor, queue, options, attempt, as_json)


def _policy(path: str | None, broker: dramatiq.Broker | None) -> Policy:
    if path is not None:
        return Policy.load(path)
    installed = app_policy(broker) if broker is not None else None
    return installed or Policy.load(None)


def _decide(loaded: Policy, exc: BaseException, actor: str, queue: str, contract: JobContract, attempt: int,
            draw: float = 0.5) -> Decision:
    return loaded.decide(Failure(exception=exc, actor=actor, queue=queue, attempt=attempt, retry_count=attempt - 1,
                                 contract=contract, now=time.time(), rand=lambda: draw))


def _explain_one(loaded: Policy, exc: BaseException, note: str | None, actor: str, queue: str,
                 options: Mapping[str, Any], attempt: int, as_json: bool) -> None:
    contract = loaded.contract(actor, queue, options)
    low, decision, high = (_decide(loaded, exc, actor, queue, contract, attempt, draw) for draw in (0.0, 0.5, _TOP))
    _, rule, _ = loaded.classify(exc, actor, queue, contract)
    tried = loaded.rules_for(actor, queue)
    shown = tried[: tried.index(rule) + 1] if rule is not None else tried
    if as_json:
        emit_json({
            "policy": list(loaded.sources), "actor": actor, "queue": queue, "note": note,
            "decision": decision.as_detail(),
            "delay_range": None if decision.delay is None else [low.delay, high.delay],
            "rules_tried": [{"rule": r.label, "matches": r is rule, "conditions": r.describe(),
                             "applies": r.applies_to(contract.idempotent)} for r in shown],
            "contract": asdict(contract),
        })
        return
    _print(Console(highlight=False, soft_wrap=True), loaded, decision, low, high, shown, rule, contract, note)


def _per_actor(loaded: Policy, actors: list[DeclaredActor], exc: BaseException, note: str | None,
               queue: str | None, attempt: int, as_json: bool) -> None:
    rows = []
    for declared in actors:
        where = queue or declared.queue
        contract = loaded.contract(declared.name, where, declared.options)
        rows.append((declared, where, contract, _decide(loaded, exc, declared.name, where, contract, attempt)))
    if as_json:
        emit_json({"policy": list(loaded.sources), "note": note, "actors": [
            {"actor": d.name, "queue": q, "idempotent": c.idempotent, "decision": decision.as_detail()}
            for d, q, c, decision in rows]})
        return
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]policy[/]     {', '.join(loaded.sources)}")
    console.print(f"[bold]exception[/]  {rows[0][3].exception_type if rows else exc}"
                  + (f"  [dim]({note})[/]" if note else ""))
    table = Table("actor", "queue", "idempotent", "class", "action", "rule")
    for declared, where, contract, decision in rows:
        table.add_row(declared.name, where, str(contract.idempotent), decision.error_class, decision.action.upper(),
                      decision.rule or "default class")
    print_table(console, table)


def _contracts(loaded: Policy, actors: list[DeclaredActor], as_json: bool) -> None:
    rows = [(d, loaded.contract(d.name, d.queue, d.options)) for d in actors]
    if as_json:
        emit_json({"policy": list(loaded.sources), "actors": [
            {"actor": d.name, "queue": d.queue, "declared": d.where, "contract": asdict(c)} for d, c in rows]})
        return
    console = Console(highlight=False, soft_wrap=True)
    console.print(f"[bold]policy[/]     {', '.join(loaded.sources)}")
    table = Table("actor", "queue", "idempotent", "retry_on_crash", "max_attempts", "backoff", "owner", "resumable",
                  "compensation", title="contracts (policy + each actor's declared options)")
    for declared, c in rows:
        table.add_row(declared.name, declared.queue, str(c.idempotent), str(c.retry_on_crash), str(c.max_attempts),
                      f"{format_duration(c.backoff.base)}..{format_duration(c.backoff.cap)} {c.backoff.jitter}",
                      c.owner or "-", str(c.resumable), c.compensation or "-")
    print_table(console, table)


def _print(console: Console, loaded: Policy, decision: Decision, low: Decision, high: Decision,
           shown: tuple[Any, ...], rule: Any, contract: JobContract, note: str | None) -> None:
    console.print(f"[bold]policy[/]     {', '.join(loaded.sources)}")
    console.print(f"[bold]exception[/]  {decision.exception_type}"
                  + (f"  [dim]({note})[/]" if note else ""))
    for index, candidate in enumerate(shown, 1):
        mark = "[green]MATCH[/]" if candidate is rule else "[dim]no[/]   "
        skipped = "" if candidate.applies_to(contract.idempotent) else \
            f"  [dim](skipped: the job is{'' if contract.idempotent else ' not'} idempotent)[/]"
        console.print(f"  {mark} {index}. {candidate.label}: {candidate.describe()}{skipped}")
    if rule is None:
        console.print(f"[bold]no rule matched[/]: the default class applies ({decision.rule or 'default'})")
    console.print(f"[bold]error class[/] {decision.error_class}")
    action = decision.action.upper()
    if decision.delay is not None:
        spread = "" if low.delay == high.delay else \
            f" (jitter: between {format_duration(low.delay or 0)} and {format_duration(high.delay or 0)})"
        action += f" in {format_duration(decision.delay)}{spread}"
    console.print(f"[bold]action[/]      {action}")
    if decision.queue is not None:
        console.print(f"[bold]queue[/]       {decision.queue} (the retry waits on this queue, not the job's own)")
    console.print(f"[bold]reason[/]      {decision.reason}")
    flags = [name for name, on in (("alert", decision.alert), ("rate limited", decision.rate_limited),
                                   ("retry budget exhausted", decision.budget_exhausted)) if on]
    console.print(f"[bold]flags[/]       {', '.join(flags) or 'none'}")
    console.print(f"[bold]contract[/]    max_attempts={contract.max_attempts} idempotent={contract.idempotent} "
                  f"retry_on_crash={contract.retry_on_crash} backoff={format_duration(contract.backoff.base)}.."
                  f"{format_duration(contract.backoff.cap)} ({contract.backoff.jitter} jitter) owner={contract.owner}")
