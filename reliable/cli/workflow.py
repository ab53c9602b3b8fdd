"""`reliable workflow`: list, show (the DAG drawn with node states), pause, stop, cancel, resume, restart.

Thin over `reliable.workflows.engine.WorkflowEngine`: every command is audited on the workflow
(who, why) and, for each node job it touches, on the job by `Control`.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import click
from rich.table import Table

from ..errors import ConfigError, ReliableError
from ..states import FAILURE_STATES
from ..store import StateStore
from ..store.workflows import WorkflowStore
from ..workflows.definition import Workflow
from ..workflows.drawing import draw_dag
from ..workflows.engine import WorkflowCommand, WorkflowEngine, find_middleware
from ..workflows.planning import NodeView, Snapshot, WorkflowStatus, node_states, workflow_status
from .common import (
    BROKER_QUEUES_HELP,
    REASON,
    emit_json,
    fmt_time,
    handle_errors,
    id_column,
    open_source,
    print_table,
    source_options,
    stdout_console,
)
from .control import ALLOW_DUPLICATES, EXIT_ERROR, EXIT_REFUSED, allow_duplicates_option, build_control

if TYPE_CHECKING:
    from .api_client import ApiClient

__all__ = ["workflow"]

_LINKED_LIMIT = 1000


@click.group()
def workflow() -> None:
    """Workflows (DAGs of jobs): list, show, pause, stop, cancel, resume only what failed, restart.

    A workflow id may be cut to its first 6 or more characters when no other workflow's id starts
    with them.
    """


def _resolve(rows: WorkflowStore, given: str) -> str:
    return rows.resolve(given)


@workflow.command("list")
@source_options
@click.option("--status", "statuses", multiple=True, metavar="STATUS",
              type=click.Choice(WorkflowStatus.ALL, case_sensitive=False),
              help="Only workflows in this status (repeatable).")
@click.option("--name", "names", multiple=True, help="Only workflows with this name (repeatable: any of them).")
@click.option("--limit", default=50, show_default=True, help="At most this many rows (newest first).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@handle_errors
def list_(store_url: str | None, api_url: str | None, token_file: str | None, statuses: tuple[str, ...],
          names: tuple[str, ...], limit: int, as_json: bool) -> None:
    """List workflows, newest first."""
    source = open_source(store_url, api_url, token_file)
    wanted = [s.upper() for s in statuses]
    if isinstance(source, StateStore):
        rows = WorkflowStore(source).listing(status=wanted, names=names, limit=limit)
    else:
        with source:
            rows = source.request("GET", "workflows", params={"status": wanted, "name": list(names),
                                                              "limit": limit})["workflows"]
    if as_json:
        emit_json(rows)
        return
    table = Table(id_column("workflow_id"), "name", "status", "hold", "run", "nodes", "created", "updated",
                  title=f"workflows ({len(rows)})")
    for row in rows:
        table.add_row(row["workflow_id"], row["name"], row["status"], row["hold"] or "-", str(row["run"]),
                      str(row["nodes"] or 0), fmt_time(row["created_at"]), fmt_time(row["updated_at"]))
    print_table(stdout_console(), table)


@workflow.command("show")
@source_options
@click.argument("workflow_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (workflow, nodes with states, edges, events).")
@handle_errors
def show(store_url: str | None, api_url: str | None, token_file: str | None, workflow_id: str,
         as_json: bool) -> None:
    """Show a workflow: its DAG drawn with each node's state, its nodes' jobs and its history.

    The id of a Dramatiq pipeline (its first step's message id) or group with completion callbacks
    (its completion id) shows the jobs linked to it, drawn from their parent links, with the status
    derived from them as for a workflow (through the store only: the API shows workflows).
    """
    source = open_source(store_url, api_url, token_file)
    if isinstance(source, StateStore):
        rows = WorkflowStore(source)
        workflow_id = _resolve(rows, workflow_id)
        if rows.find(workflow_id) is None:
            _show_linked(rows.store, workflow_id, as_json)
            return
        snapshot = rows.snapshot(workflow_id)
        states = node_states(snapshot)
        parents = {v.name: list(v.parents) for v in snapshot.nodes}
        head, events, edges = rows.get(workflow_id), rows.events(workflow_id), rows.edges(workflow_id)
        nodes = [{**n, "state": states[n["node"]], "parents": parents[n["node"]]} for n in rows.nodes(workflow_id)]
    else:
        with source:
            detail = source.request("GET", f"workflows/{quote(workflow_id, safe='')}")
        head, nodes, edges, events = detail["workflow"], detail["nodes"], detail["edges"], detail["events"]
    if as_json:
        emit_json({"workflow": head, "nodes": [{k: v for k, v in n.items() if k not in ("message", "parents")}
                                               for n in nodes],
                   "edges": [list(edge) for edge in edges], "events": events})
        return
    _print_workflow(head, nodes, events)


def _print_workflow(head: dict[str, Any], nodes: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
    """A workflow as text: its head, its DAG with each node's state (a failed node's error), nodes, history."""
    click.echo(f"workflow {head['workflow_id']}  {head['name']}  {head['status']}"
               + (f"  (hold: {head['hold']})" if head["hold"] else "") + f"  run {head['run']}")
    click.echo(f"created {fmt_time(head['created_at'])}  updated {fmt_time(head['updated_at'])}"
               + (f"  finished {fmt_time(head['finished_at'])}" if head["finished_at"] else ""))
    click.echo()
    labels = {}
    for row in nodes:
        state = row["state"]
        error = row["last_error_message"] if state in FAILURE_STATES else None
        kind = (row["last_error_type"] or "").rsplit(".", 1)[-1]
        labels[row["node"]] = state + (f"  {kind + ': ' if kind else ''}{error.splitlines()[0][:80]}" if error else "")
    for line in draw_dag([n["node"] for n in nodes], {n["node"]: n["parents"] for n in nodes}, labels):
        click.echo(line)
    table = Table("node", "state", "actor", id_column("job_id"), "attempt", "run", "finished", title="nodes")
    for n in nodes:
        table.add_row(n["node"], n["state"], n["actor"], n["job_id"] if n["job_status"] else "-",
                      str(n["attempt"] or 0), str(n["run"]), fmt_time(n["finished_at"]))
    print_table(stdout_console(), table)
    history = Table("at", "event", "from", "to", "operator", "reason", title="history")
    for event in events[-20:]:
        history.add_row(fmt_time(event["at"]), event["event"], event["from_status"] or "-", event["to_status"] or "-",
                        event["operator"] or "-", event["reason"] or "-")
    print_table(stdout_console(), history)


def _show_linked(store: StateStore, workflow_id: str, as_json: bool) -> None:
    """The jobs of a Dramatiq pipeline or group, linked by workflow_id and parent_job_id."""
    linked = sorted(store.list_jobs(workflow_id=workflow_id, limit=_LINKED_LIMIT), key=lambda j: j.created_at)
    ids = {job.job_id for job in linked}
    views = tuple(NodeView(name=job.job_id, job_id=job.job_id, job_status=job.status.value,
                           parents=(job.parent_job_id,) if job.parent_job_id in ids else ()) for job in linked)
    status = workflow_status(Snapshot(workflow_id, views))
    if as_json:
        emit_json({"workflow_id": workflow_id, "kind": "linked", "status": status,
                   "jobs": [job.as_dict() for job in linked]})
        return
    click.echo(f"linked jobs {workflow_id}  (a Dramatiq pipeline or group)  {status}  {len(linked)} job(s)")
    click.echo()
    labels = {job.job_id: f"{job.actor}  {job.status.value}"
              + (f"  {job.last_error_message.splitlines()[0][:80]}" if job.last_error_message
                 and job.status in FAILURE_STATES else "") for job in linked}
    for line in draw_dag([v.name for v in views], {v.name: v.parents for v in views}, labels):
        click.echo(line)


def _command_options(func: Any) -> Any:
    options = [
        source_options,
        click.argument("workflow_id"),
        click.option("--reason", type=REASON,
                     help="Why you are doing this (required, also with --dry-run); recorded on the workflow and "
                          "on every job the command changes."),
        click.option("--operator", "operator_name", help="Who you are, for the audit trail [default: "
                                                         "$RELIABLE_OPERATOR, else your OS user]."),
        click.option("--operators-file", type=click.Path(dir_okay=False), envvar="RELIABLE_OPERATORS_FILE",
                     show_envvar=True, help="Operators policy (YAML): the command must be allowed on every node's "
                                            "queue and owner."),
        click.option("--broker", "broker_url", envvar="RELIABLE_BROKER", show_envvar=True,
                     help="RabbitMQ URL: publish the jobs that start now (without it the workers' sweeper does)."
                          + BROKER_QUEUES_HELP),
        click.option("--dry-run", is_flag=True, help="Print the plan; change nothing, record nothing."),
        click.option("--json", "as_json", is_flag=True, help="Print the result as JSON."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _run(command: str, params: dict[str, Any], definition: str | None = None) -> None:
    if not params.get("reason"):
        raise click.UsageError("--reason is required: say why (it is recorded on the workflow and its jobs); "
                               "nothing was done")
    try:
        source = open_source(params["store_url"], params["api_url"], params["token_file"])
        if not isinstance(source, StateStore):
            result = _run_via_api(source, command, params, definition)
        else:
            result = _run_on_store(source, command, params, definition).as_dict()
    except ReliableError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(EXIT_ERROR)
    _render(result, params["as_json"])
    if result["outcome"] == "refused":
        sys.exit(EXIT_REFUSED)


def _run_on_store(store: StateStore, command: str, params: dict[str, Any], definition: str | None
                  ) -> WorkflowCommand:
    workflow_id = _resolve(WorkflowStore(store), params["workflow_id"])
    control = build_control(store, {**params, "policies_path": None})
    engine = _engine(store, control.broker, definition)
    reason, dry_run = params["reason"], params["dry_run"]
    if command in ("pause", "stop", "cancel"):
        return engine.hold(command, workflow_id, control, reason=reason, dry_run=dry_run)
    if command == "resume":
        loaded = _load_definition(definition) if definition else None
        return engine.resume(workflow_id, control, reason=reason, dry_run=dry_run, definition=loaded,
                             allow_duplicates=params[ALLOW_DUPLICATES])
    return engine.restart(workflow_id, control, reason=reason, dry_run=dry_run,
                          allow_duplicates=params[ALLOW_DUPLICATES])


def _run_via_api(client: ApiClient, command: str, params: dict[str, Any], definition: str | None
                 ) -> dict[str, Any]:
    """The command through POST /api/v1/workflows/{id}/{command}: the server decides who you are."""
    from .via_api import refuse_store_side

    refuse_store_side({**params, "definition": definition}, {"definition": "--definition"})
    body: dict[str, Any] = {"reason": params["reason"], "dry_run": bool(params["dry_run"])}
    if command in ("resume", "restart"):
        body["allow_duplicate_side_effects"] = bool(params.get(ALLOW_DUPLICATES))
    with client:
        return client.act(f"workflows/{quote(params['workflow_id'], safe='')}/{command}", body)


def _engine(store: StateStore, broker: Any, definition: str | None) -> WorkflowEngine:
    """The engine; with `definition`, on the application's broker its import set up (`broker`, from
    --broker, then only carries Control's job commands)."""
    if not definition:
        return WorkflowEngine(store, broker)
    _import_target(definition)  # the application: its broker has reliable installed and the actors declared
    import dramatiq

    # The application's broker, not --broker's: the definition's actors are declared (and their
    # contracts known) only there, and it publishes to the application's queues.
    app_broker = dramatiq.get_broker()
    return WorkflowEngine(store, app_broker, middleware=find_middleware(app_broker))


def _import_target(spec: str) -> Any:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ConfigError("--definition must be MODULE:ATTRIBUTE (a Workflow or a function returning one), "
                          f"got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--definition {spec}: cannot import {module_name!r}: {exc}") from None
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise ConfigError(f"--definition {spec}: module {module_name!r} has no {attribute!r}") from None


def _load_definition(spec: str) -> Workflow:
    target = _import_target(spec)
    value = target() if callable(target) and not isinstance(target, Workflow) else target
    if not isinstance(value, Workflow):
        raise ConfigError(f"--definition {spec}: expected a reliable Workflow, got {type(value).__name__}")
    return value


def _render(result: dict[str, Any], as_json: bool) -> None:
    """A command's result (`WorkflowCommand.as_dict()`, from the store or the API) as text or JSON."""
    if as_json:
        emit_json(result)
        return
    ok = result["outcome"] != "refused"
    stream = sys.stdout if ok else sys.stderr
    click.echo(f"{'' if ok else 'error: '}{result['command']} {result['workflow_id']}: {result['message']}",
               file=stream)
    plan = result.get("plan")
    if plan is not None and plan.get("refusal") is None:
        for label, key in (("keep", "keep"), ("resume", "resume"), ("run again", "rerun"), ("changed", "changed")):
            if plan.get(key):
                click.echo(f"  {label} ({len(plan[key])}): {', '.join(plan[key])}")
    for job in result.get("jobs") or ():
        if job.get("outcome") == "refused":
            click.echo(f"  refused: job {job['job_id']}: {job['message']}", err=True)
    if result.get("status") and result["outcome"] == "done":
        click.echo(f"  status: {result['status']}")


def _command(name: str, help_text: str) -> None:
    @workflow.command(name, help=help_text)
    @_command_options
    @handle_errors
    def command(**params: Any) -> None:
        _run(name, params)


_command("pause", "Pause a workflow: no node starts, its jobs pause (running ones at their next checkpoint).")
_command("stop", "Stop a workflow: no node starts, running jobs stop after their current unit.")
_command("cancel", "Cancel a workflow: no node starts, its jobs are cancelled (compensation runs where declared).")


@workflow.command("restart")
@_command_options
@allow_duplicates_option
@handle_errors
def restart(**params: Any) -> None:
    """Run every node of a finished or stopped workflow again, as new jobs.

    Exit status: 0 done; 1 refused (recorded on the workflow as `command_refused`); 2 bad input.
    """
    _run("restart", params)


@workflow.command("resume")
@_command_options
@allow_duplicates_option
@click.option("--definition", metavar="MODULE:ATTR",
              help="The workflow as declared now (a Workflow, or a function returning one, in your application: "
                   "importing it installs reliable on its broker). Nodes whose inputs or actor code_version "
                   "changed are recomputed with everything downstream of them.")
@handle_errors
def resume(definition: str | None, **params: Any) -> None:
    """Resume a workflow: re-run only its failed, stopped or cancelled nodes and what depends on them;
    keep every succeeded node's result (unless --definition shows its inputs changed).

    Exit status: 0 done; 1 refused (recorded on the workflow as `command_refused`); 2 bad input.
    """
    _run("resume", params, definition)

