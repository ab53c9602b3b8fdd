"""`reliable policy`: validate policy files and explain what a failure would become."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import asdict
from typing import Any

import click
from rich.console import Console

from ..policy import Decision, Failure, JobContract, Policy, format_duration
from ..policy.check import check_path, resolve_exception
from ..policy.matching import normalize_exception_path
from .common import emit_json, handle_errors

__all__ = ["policy", "synthetic_exception"]

_TOP = 1.0 - 1e-12  # the largest jitter draw (rand() is in [0, 1))


def _cwd_on_path() -> None:
    # Like python -m: exception paths in a project's policy name the project's own modules.
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


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


@policy.command()
@click.argument("path", type=click.Path())
@handle_errors
def check(path: str) -> None:
    """Validate the policy file or directory PATH strictly (exception paths must import).

    Prints "OK: N rules, M actors", or one line per problem (file:line: field: message) and exits 2.
    """
    _cwd_on_path()
    result = check_path(path)
    if not result.ok:
        for problem in result.problems:
            click.echo(str(problem), err=True)
        sys.exit(2)
    click.echo(f"OK: {result.rules} rules, {result.actors} actors")


@policy.command()
@click.argument("path", type=click.Path())
@click.option("--exception", "exception_path", required=True,
              help="Dotted exception class, e.g. httpx.HTTPStatusError.")
@click.option("--status", type=click.IntRange(100, 599), help="HTTP status the exception carries.")
@click.option("--message", default="", help="The exception's message.")
@click.option("--actor", default="", help="Actor name (its actor section and rules apply).")
@click.option("--queue", default="default", show_default=True, help="Queue name (its queue section and rules apply).")
@click.option("--retry-after", help="A Retry-After value: seconds or an HTTP date.")
@click.option("--attempt", type=click.IntRange(1), default=1, show_default=True, help="The attempt that failed.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def explain(path: str, exception_path: str, status: int | None, message: str, actor: str, queue: str,
            retry_after: str | None, attempt: int, as_json: bool) -> None:
    """Show which rule of the policy at PATH matches an exception, and what would happen."""
    _cwd_on_path()
    loaded = Policy.load(path)
    exc, note = synthetic_exception(exception_path, message=message, status=status, retry_after=retry_after)
    contract = loaded.contract(actor, queue)
    now = time.time()

    def decide(draw: float) -> Decision:
        return loaded.decide(Failure(exception=exc, actor=actor, queue=queue, attempt=attempt,
                                     retry_count=attempt - 1, contract=contract, now=now, rand=lambda: draw))

    low, decision, high = decide(0.0), decide(0.5), decide(_TOP)
    _, rule, _ = loaded.classify(exc, actor, queue, contract)
    tried = loaded.rules_for(actor, queue)
    shown = tried[: tried.index(rule) + 1] if rule is not None else tried
    if as_json:
        emit_json({
            "policy": list(loaded.sources), "actor": actor, "queue": queue, "note": note,
            "decision": decision.as_detail(),
            "delay_range": None if decision.delay is None else [low.delay, high.delay],
            "rules_tried": [{"rule": r.label, "matches": r is rule, "conditions": r.describe()} for r in shown],
            "contract": asdict(contract),
        })
        return
    _print(Console(highlight=False, soft_wrap=True), loaded, decision, low, high, shown, rule, contract, note)


def _print(console: Console, loaded: Policy, decision: Decision, low: Decision, high: Decision,
           shown: tuple[Any, ...], rule: Any, contract: JobContract, note: str | None) -> None:
    console.print(f"[bold]policy[/]     {', '.join(loaded.sources)}")
    console.print(f"[bold]exception[/]  {decision.exception_type}"
                  + (f"  [dim]({note})[/]" if note else ""))
    for index, candidate in enumerate(shown, 1):
        mark = "[green]MATCH[/]" if candidate is rule else "[dim]no[/]   "
        console.print(f"  {mark} {index}. {candidate.label}: {candidate.describe()}")
    if rule is None:
        console.print(f"[bold]no rule matched[/]: the default class applies ({decision.rule or 'default'})")
    console.print(f"[bold]error class[/] {decision.error_class}")
    action = decision.action.upper()
    if decision.delay is not None:
        spread = "" if low.delay == high.delay else \
            f" (jitter: between {format_duration(low.delay or 0)} and {format_duration(high.delay or 0)})"
        action += f" in {format_duration(decision.delay)}{spread}"
    console.print(f"[bold]action[/]      {action}")
    console.print(f"[bold]reason[/]      {decision.reason}")
    flags = [name for name, on in (("alert", decision.alert), ("rate limited", decision.rate_limited),
                                   ("retry budget exhausted", decision.budget_exhausted)) if on]
    console.print(f"[bold]flags[/]       {', '.join(flags) or 'none'}")
    console.print(f"[bold]contract[/]    max_attempts={contract.max_attempts} idempotent={contract.idempotent} "
                  f"retry_on_crash={contract.retry_on_crash} backoff={format_duration(contract.backoff.base)}.."
                  f"{format_duration(contract.backoff.cap)} ({contract.backoff.jitter} jitter) owner={contract.owner}")
