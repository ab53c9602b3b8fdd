"""The console's workflow and schedule pages (issue 28), over `reliable.web.flows` as the API is.

    /workflows                               the list (?status=)
    /workflows/{workflow_id}                 the DAG drawn (SVG), nodes, history, commands
    POST /workflows/{workflow_id}/actions/{command}   pause, stop, cancel, resume, restart (dry run: the plan)
    /schedules                               the list
    /schedules/{name}                        slots with their jobs, audit trail, commands
    POST /schedules/{name}/actions/{command}  pause, resume, trigger
"""

from __future__ import annotations

import functools
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..control import SCHEDULE_COMMANDS
from ..errors import ReliableError, ScheduleNotFound
from ..states import FAILURE_STATES
from ..store.workflow_views import WorkflowStatus
from ..store.workflows import WorkflowNotFound
from ..workflows.drawing import dag_svg
from .auth import authenticate, state_of
from .console import error_page, flash, render
from .flows import (
    SCHEDULE_ACTIONS,
    WORKFLOW_ACTIONS,
    schedule_command,
    schedule_detail,
    schedule_list,
    workflow_command,
    workflow_detail,
    workflow_list,
)
from .paths import SegmentRoute

__all__ = ["routes"]


async def workflows_page(request: Request) -> Response:
    """GET /workflows: workflows, newest first (?status= to narrow)."""
    principal = await authenticate(request)
    state = state_of(request)
    wanted = request.query_params.get("status") or ""
    rows = await run_in_threadpool(functools.partial(workflow_list, state, status=(wanted,) if wanted else (),
                                                     limit=200))
    return render(request, "workflows.html", principal=principal, workflows=rows, status=wanted,
                  statuses=WorkflowStatus.ALL)


def _graph(request: Request, detail: dict[str, Any]) -> str:
    nodes = detail["nodes"]
    order = [n["node"] for n in nodes]
    parents = {n["node"]: n["parents"] for n in nodes}
    states = {n["node"]: n["state"] for n in nodes}
    errors = {n["node"]: " ".join(filter(None, [(n["last_error_type"] or "").rsplit(".", 1)[-1] + ":"
                                                if n["last_error_type"] else None, n["last_error_message"]]))
              for n in nodes if n["state"] in FAILURE_STATES and n["last_error_message"]}
    links = {n["node"]: str(request.url_for("job", job_id=n["job_id"])) for n in nodes if n["job_id"]}
    return dag_svg(order, parents, states, errors, links)


async def workflow_page(request: Request) -> Response:
    """GET /workflows/{workflow_id}: the DAG with each node's state, the failed nodes' errors, the
    nodes' jobs, the workflow's history and its commands (a prefix redirects)."""
    principal = await authenticate(request)
    state = state_of(request)
    given = request.path_params["workflow_id"]
    try:
        detail = await run_in_threadpool(workflow_detail, state, given, principal)
    except WorkflowNotFound as exc:
        return error_page(request, 404, str(exc))
    workflow_id = detail["workflow"]["workflow_id"]
    if workflow_id != given:
        return RedirectResponse(str(request.url_for("workflow", workflow_id=workflow_id)), 303)
    permitted = {c: all(principal.allows(c, n["queue"], n["owner"]) for n in detail["nodes"])
                 for c in WORKFLOW_ACTIONS}
    plan = request.session.pop("workflow_plan", None)
    return render(request, "workflow.html", principal=principal, d=detail, w=detail["workflow"],
                  graph=_graph(request, detail), failed=[n for n in detail["nodes"] if n["state"] in FAILURE_STATES],
                  permitted_commands=[c for c in WORKFLOW_ACTIONS if permitted[c]], plan=plan)


async def workflow_action(request: Request) -> Response:
    """POST /workflows/{workflow_id}/actions/{command}: run it (or its dry run: the plan shown on the page)."""
    principal = await authenticate(request)  # checks the CSRF token of a session
    command = request.path_params["command"]
    if command not in WORKFLOW_ACTIONS:
        raise HTTPException(404, f"no workflow command {command!r} (known: {', '.join(WORKFLOW_ACTIONS)})")
    state = state_of(request)
    form = await request.form()
    reason = str(form.get("reason") or "").strip() or None
    dry_run = form.get("dry_run") == "yes"
    workflow_id = request.path_params["workflow_id"]
    try:
        result = await run_in_threadpool(functools.partial(
            workflow_command, state, workflow_id, command, principal, reason=reason, dry_run=dry_run,
            allow_duplicates=form.get("confirm_duplicates") == "yes"))
    except WorkflowNotFound as exc:
        return error_page(request, 404, str(exc))
    except ReliableError as exc:
        flash(request, "error", f"{command} refused: {exc}")
    else:
        flash(request, "ok" if result.ok else "error",
              f"{command}{' (dry run)' if dry_run else ''}: {result.message}"
              + (f"; workflow {result.status}" if result.status and not dry_run else ""))
        if result.plan is not None:
            request.session["workflow_plan"] = {"command": command, "dry_run": dry_run, **result.plan.as_dict()}
        workflow_id = result.workflow_id
    return RedirectResponse(str(request.url_for("workflow", workflow_id=workflow_id)), 303)


async def schedules_page(request: Request) -> Response:
    """GET /schedules: every schedule, its state, next and last slot."""
    principal = await authenticate(request)
    rows = await run_in_threadpool(schedule_list, state_of(request), principal)
    return render(request, "schedules.html", principal=principal, schedules=rows)


async def schedule_page(request: Request) -> Response:
    """GET /schedules/{name}: the schedule, its recent slots and their jobs, its audit trail, its commands."""
    principal = await authenticate(request)
    state = state_of(request)
    try:
        detail = await run_in_threadpool(functools.partial(schedule_detail, state, request.path_params["name"],
                                                           principal, limit=50))
    except ScheduleNotFound as exc:
        return error_page(request, 404, str(exc))
    row = detail["schedule"]
    permitted = {c: principal.allows(SCHEDULE_COMMANDS[f"schedules {c}"], row["queue"], row["owner"])
                 for c in SCHEDULE_ACTIONS}
    return render(request, "schedule.html", principal=principal, d=detail, s=row, actions=SCHEDULE_ACTIONS,
                  permitted=permitted)


async def schedule_action(request: Request) -> Response:
    """POST /schedules/{name}/actions/{command}: pause, resume or trigger; back to the schedule."""
    principal = await authenticate(request)
    command = request.path_params["command"]
    if command not in SCHEDULE_ACTIONS:
        raise HTTPException(404, f"no schedule command {command!r} (known: {', '.join(SCHEDULE_ACTIONS)})")
    state = state_of(request)
    form = await request.form()
    name = request.path_params["name"]
    try:
        result = await run_in_threadpool(functools.partial(schedule_command, state, name, command, principal,
                                                           reason=str(form.get("reason") or "").strip() or None))
    except ScheduleNotFound as exc:
        return error_page(request, 404, str(exc))
    except ReliableError as exc:
        flash(request, "error", f"{command} refused: {exc}")
    else:
        flash(request, "ok" if result.ok else "error", f"{command}: {result.message}")
    return RedirectResponse(str(request.url_for("schedule", name=name)), 303)


def routes() -> list[BaseRoute]:
    """The workflow and schedule pages."""
    return [
        Route("/workflows", workflows_page, name="workflows"),
        Route("/workflows/{workflow_id}", workflow_page, name="workflow"),
        Route("/workflows/{workflow_id}/actions/{command}", workflow_action, methods=["POST"],
              name="workflow_action"),
        Route("/schedules", schedules_page, name="schedules"),
        SegmentRoute("/schedules/{name}", schedule_page, param="name", name="schedule"),
        SegmentRoute("/schedules/{name}/actions/{command}", schedule_action, param="name", methods=["POST"],
                     name="schedule_action"),
    ]
