"""`reliable schedules`: recurring jobs: list, show, pause, resume, trigger, and the scheduler as a process."""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, TypeVar
from urllib.parse import quote

import click
from rich.table import Table

from ..control import SCHEDULE_COMMANDS, require_reason
from ..errors import NotAuthorized
from ..operators import Operator, OperatorsPolicy
from ..schedules import Schedule, storage
from ..store import StateStore
from .common import (
    BROKER_QUEUES_HELP,
    POSITIVE_DURATION,
    audited_options,
    emit_json,
    fmt_time,
    handle_errors,
    id_column,
    open_source,
    open_store,
    print_table,
    rabbitmq_broker,
    repeat,
    source_options,
    stdout_console,
    store_option,
)

__all__ = ["schedules"]

F = TypeVar("F", bound=Callable[..., Any])

EXIT_UNCHANGED = 1  # pause of a paused schedule, resume of a running one: nothing written
DEFAULT_INTERVAL = 5.0

EXIT_CODES_HELP = ("Exit status: 0 done; 1 nothing to do (already in that state); 2 bad input (a missing --reason: "
                   "nothing is written), no such schedule, or a store error.")

broker_option = click.option("--broker", "broker_url", envvar="RELIABLE_BROKER", show_envvar=True, required=True,
                             help="RabbitMQ URL (amqp://...) to publish the fired jobs on." + BROKER_QUEUES_HELP)


_operator_options = audited_options("pause/resume/trigger/delete need the job command pause/resume/restart/"
                                    "discard on the schedule's queue and owner.", "the schedule's audit trail")


def _rabbitmq(url: str) -> Any:
    return rabbitmq_broker(url)


def _row_dict(row: storage.ScheduleRow) -> dict[str, Any]:
    return {"name": row.name, "timing": row.schedule.describe(), "actor": row.actor, "queue": row.queue,
            "paused": row.paused, "misfire": row.schedule.misfire, "next_slot": row.next_slot,
            "last_slot": row.last_slot, "decided_until": row.decided_until, "definition": row.schedule.definition(),
            "created_at": row.created_at, "updated_at": row.updated_at}


@click.group(short_help="Recurring jobs: list, show, pause, resume, trigger, delete, run.")
def schedules() -> None:
    """Recurring jobs (`reliable docs schedules`): one job per slot of a cron expression or an interval.

    Schedules are declared in the app (`reliable.install(..., schedules=...)`) and stored at worker
    boot; every worker runs the scheduler, and `run` runs one on its own. `pause`, `resume`,
    `trigger` and `delete` are recorded with who, why and when (`show` lists them) and checked
    against the operators policy when one is given.
    """


@schedules.command("list")
@source_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: a list of schedules.")
@handle_errors
def list_(store_url: str | None, api_url: str | None, token_file: str | None, as_json: bool) -> None:
    """List the stored schedules: timing, actor, state, next and last slot."""
    source = open_source(store_url, api_url, token_file)
    if isinstance(source, StateStore):
        rows = [_row_dict(row) for row in storage.list_schedules(source)]
    else:
        with source:
            rows = source.request("GET", "schedules")["schedules"]
    if as_json:
        emit_json(rows)
        return
    table = Table(id_column("name"), "timing", "actor", "queue", "state", "misfire", "next slot", "last slot",
                  title="schedules")
    for row in rows:
        table.add_row(row["name"], row["timing"], row["actor"], row["queue"], "paused" if row["paused"] else "active",
                      row["misfire"], "-" if row["paused"] else fmt_time(row["next_slot"]),
                      fmt_time(row["last_slot"]))
    print_table(stdout_console(), table)


@schedules.command()
@click.argument("name")
@source_options
@click.option("--limit", type=click.IntRange(min=1), default=20, show_default=True,
              help="At most this many recent slots and audit entries.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: schedule, slots, events.")
@handle_errors
def show(name: str, store_url: str | None, api_url: str | None, token_file: str | None, limit: int,
         as_json: bool) -> None:
    """Show a schedule: its declaration and state, its recent slots with their jobs, its audit trail."""
    source = open_source(store_url, api_url, token_file)
    if isinstance(source, StateStore):
        row = _row_dict(storage.get_schedule(source, name))
        slots = [{**asdict(s), "status": s.status.value if s.status else None}
                 for s in storage.list_slots(source, name, limit=limit)]
        events = [asdict(e) for e in storage.list_events(source, name, limit=limit)]
    else:
        with source:
            detail = source.request("GET", f"schedules/{quote(name, safe='')}", params={"limit": limit})
        row, slots, events = detail["schedule"], detail["slots"], detail["events"]
    if as_json:
        emit_json({"schedule": row, "slots": slots, "events": events})
        return
    console = stdout_console()
    s = Schedule.from_definition(row["definition"])
    console.print(f"schedule {row['name']}: {s.describe()} -> {row['actor']}(args={list(s.args)}, kwargs={s.kwargs}) "
                  f"on queue {row['queue']}", markup=False, highlight=False)
    catch_up = f" (at most {s.catch_up_max})" if s.misfire == "catch_up" else ""
    console.print(f"  state {'paused' if row['paused'] else 'active'}; misfire {s.misfire}{catch_up}, "
                  f"grace {s.grace:g}s; next slot "
                  f"{'-' if row['paused'] else fmt_time(row['next_slot'])}; last slot {fmt_time(row['last_slot'])}",
                  markup=False, highlight=False)
    table = Table("slot", "kind", id_column(), "state", "fired", title="recent slots")
    for slot in slots:
        table.add_row(fmt_time(slot["slot_at"]), slot["kind"], slot["job_id"], slot["status"] or "-",
                      fmt_time(slot["fired_at"]))
    print_table(console, table)
    table = Table("at", "event", "operator", "host", "reason", "detail", title="audit trail")
    for event in events:
        detail = ", ".join(f"{k}={v}" for k, v in (event["detail"] or {}).items() if k not in ("definition", "before"))
        table.add_row(fmt_time(event["at"]), event["event"], event["operator"] or "-", event["host"] or "-",
                      event["reason"] or "-", detail or "-")
    print_table(console, table)


def _via_api(command: str, name: str, params: dict[str, Any]) -> bool:
    """`command` through POST /api/v1/schedules/{name}/{command} when --api (or $RELIABLE_API) is given;
    False when the store is to be used. Exit 1 when refused or when nothing changed, as on the store side."""
    source = open_source(params["store_url"], params["api_url"], params["token_file"])
    if isinstance(source, StateStore):
        return False
    from .via_api import refuse_store_side

    refuse_store_side(params)
    require_reason(f"schedules {command}", params["reason"])
    with source:
        result = source.act(f"schedules/{quote(name, safe='')}/{command}", {"reason": params["reason"]})
    if params["as_json"]:
        emit_json(result)
    elif result["outcome"] == "done":
        after = f"; next slot {fmt_time(result['next_slot'])}" if result.get("next_slot") else ""
        click.echo(f"{result['message']} as {result['operator']}{after}")
    else:
        click.echo(f"{'error: ' if result['outcome'] == 'refused' else ''}{result['message']}", err=True)
    if result["outcome"] != "done":
        sys.exit(EXIT_UNCHANGED)
    return True


def _authorized(command: str, name: str, reason: str | None, store_url: str | None, operator_name: str | None,
                operators_file: str | None) -> tuple[StateStore, Operator]:
    """The store and the operator, once the reason is given and the operators policy allows
    `command` on the schedule's queue and owner (a refusal is audited on the schedule: exit 1)."""
    require_reason(f"schedules {command}", reason)
    store = open_store(store_url)
    operator = Operator.resolve(operator_name)
    if operators_file:
        row = storage.get_schedule(store, name)
        try:
            OperatorsPolicy.load(operators_file).check(operator.name, SCHEDULE_COMMANDS[f"schedules {command}"],
                                                       row.queue, row.template.get("owner"))
        except NotAuthorized as exc:
            storage.refused(store, name, command, operator=operator.name, reason=reason, why=str(exc))
            click.echo(f"error: {exc}", err=True)
            sys.exit(EXIT_UNCHANGED)
    return store, operator


def _set_paused(name: str, store_url: str | None, reason: str | None, operator_name: str | None,
                operators_file: str | None, paused: bool, as_json: bool) -> None:
    command = "pause" if paused else "resume"
    store, operator = _authorized(command, name, reason, store_url, operator_name, operators_file)
    changed = storage.set_paused(store, name, paused, operator=operator.name, reason=reason or "")
    row = storage.get_schedule(store, name)
    if as_json:
        emit_json({"schedule": name, "paused": row.paused, "changed": changed, "operator": operator.name,
                   "next_slot": None if row.paused else row.next_slot})
    elif not changed:
        click.echo(f"schedule {name} is already {'paused' if paused else 'active'}: nothing changed", err=True)
    else:
        after = f"; next slot {fmt_time(row.next_slot)}" if not paused else ""
        click.echo(f"{command}d schedule {name} as {operator.name}{after}")
    if not changed:
        sys.exit(EXIT_UNCHANGED)


@schedules.command(epilog=EXIT_CODES_HELP)
@click.argument("name")
@source_options
@_operator_options
@handle_errors
def pause(name: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
          operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    """Pause a schedule: its slots stop firing until `resume` (jobs already fired are not touched)."""
    if _via_api("pause", name, locals()):
        return
    _set_paused(name, store_url, reason, operator_name, operators_file, True, as_json)


@schedules.command(epilog=EXIT_CODES_HELP)
@click.argument("name")
@source_options
@_operator_options
@handle_errors
def resume(name: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
           operator_name: str | None, operators_file: str | None, as_json: bool) -> None:
    """Resume a paused schedule. The slots that passed while it was paused do not fire; the next does."""
    if _via_api("resume", name, locals()):
        return
    _set_paused(name, store_url, reason, operator_name, operators_file, False, as_json)


@schedules.command(epilog=EXIT_CODES_HELP)
@click.argument("name")
@source_options
@_operator_options
@click.option("--broker", "broker_url", envvar="RELIABLE_BROKER", show_envvar=True,
              help="RabbitMQ URL (amqp://...) to publish the job on (required without --api: through the API "
                   "the server publishes it)." + BROKER_QUEUES_HELP)
@handle_errors
def trigger(name: str, store_url: str | None, api_url: str | None, token_file: str | None, reason: str | None,
            operator_name: str | None, operators_file: str | None, broker_url: str | None, as_json: bool) -> None:
    """Run a schedule's job once now, outside its slots (a paused schedule too); its slots go on as planned."""
    if _via_api("trigger", name, locals()):
        return
    if not broker_url:
        raise click.UsageError("--broker (or $RELIABLE_BROKER) is required: the RabbitMQ URL to publish the job on")
    store, operator = _authorized("trigger", name, reason, store_url, operator_name, operators_file)
    job = storage.trigger(store, name, operator=operator.name, reason=reason or "")
    from ..dispatch import dispatch

    try:
        dispatch(_rabbitmq(broker_url), store.get(job.job_id))
        published = True
    except Exception as exc:  # registered: the workers' sweeper publishes it
        click.echo(f"warning: publishing failed ({exc}); the workers' sweeper will publish the job", err=True)
        published = False
    if as_json:
        emit_json({"schedule": name, "job_id": job.job_id, "published": published})
        return
    click.echo(f"triggered schedule {name} as {operator.name}: job {job.job_id}")


@schedules.command(epilog=EXIT_CODES_HELP)
@click.argument("name")
@store_option
@_operator_options
@handle_errors
def delete(name: str, store_url: str | None, reason: str | None, operator_name: str | None,
           operators_file: str | None, as_json: bool) -> None:
    """Delete a schedule: no slot of it fires again (its fired slots and their jobs stay as history).

    Remove its declaration from your code first: a worker that still declares it stores it again
    when it boots.
    """
    store, operator = _authorized("delete", name, reason, store_url, operator_name, operators_file)
    storage.delete(store, name, operator=operator.name, reason=reason or "")
    if as_json:
        emit_json({"schedule": name, "deleted": True, "operator": operator.name})
        return
    click.echo(f"deleted schedule {name} as {operator.name}")


@schedules.command()
@store_option
@broker_option
@click.option("--interval", type=POSITIVE_DURATION, default=DEFAULT_INTERVAL, show_default=True,
              help="Time between ticks (5s, 1m or seconds).")
@click.option("--once", is_flag=True, help="Run one tick and exit (for cron or a test).")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object per tick, one per line: {now, fired, skipped, unpublished}.")
@handle_errors
def run(store_url: str | None, broker_url: str, interval: float, once: bool, as_json: bool) -> None:
    """Run the scheduler: fire the due slots of every schedule, then publish their jobs.

    Every worker process already runs it in its recovery loop; this is for deployments whose
    workers run with recovery=False, or for more schedulers. Any number may run at once: a slot
    fires once, whoever fires it.
    """
    from ..schedules import Scheduler, TickReport

    scheduler = Scheduler(open_store(store_url), _rabbitmq(broker_url))

    def show(report: TickReport) -> None:
        if as_json:
            emit_json(asdict(report), one_line=True)
        elif report.fired or report.skipped:
            dropped = sum(s.count for s in report.skipped)
            click.echo(f"{fmt_time(report.now)}: fired {len(report.fired)} slot(s), dropped {dropped} missed slot(s)")

    repeat(scheduler.tick, show, interval=interval, once=once)
