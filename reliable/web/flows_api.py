"""The API's workflow and schedule routes (issue 28); the rules are in `reliable.web.flows`.

    GET  /api/v1/workflows                        ?status= &name= &limit=
    GET  /api/v1/workflows/{workflow_id}          nodes (disclosed), edges, events
    POST /api/v1/workflows/{workflow_id}/{command}  pause, stop, cancel, resume, restart
    GET  /api/v1/schedules
    GET  /api/v1/schedules/{name}                 ?limit=  slots with their jobs, audit trail
    POST /api/v1/schedules/{name}/{command}       pause, resume, trigger

A command answers 200 with what it did (a dry run: its plan), 403 when the operators policy refused
it (recorded on the workflow or schedule), 409 when the workflow's state refused it (recorded too).
"""

from __future__ import annotations

import functools
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from ..access import Principal
from ..errors import ScheduleNotFound
from ..store.workflows import WorkflowNotFound
from .auth import authenticate, state_of
from .bodies import json_object
from .flows import (
    SCHEDULE_ACTIONS,
    WORKFLOW_ACTIONS,
    schedule_command,
    schedule_detail,
    schedule_list,
    workflow_command,
    workflow_detail,
    workflow_list,
    workflow_permitted,
)
from .inputs import query_int
from .paths import SegmentRoute

__all__ = ["routes"]

_WORKFLOW_FIELDS = frozenset({"reason", "dry_run", "allow_duplicate_side_effects"})
_SCHEDULE_FIELDS = frozenset({"reason"})
_MAX_LIMIT = 500


def _bad(message: str) -> HTTPException:
    return HTTPException(400, message)


def _known(request: Request, *names: str) -> None:
    for name in request.query_params:
        if name not in names:
            raise _bad(f"unknown parameter {name!r} (known: {', '.join(names) or 'none'})")


def _limit(request: Request, default: int) -> int:
    return query_int(request, "limit", default, _MAX_LIMIT)


def _body(body: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    unknown = sorted(set(body) - known)
    if unknown:
        raise _bad(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise _bad("field 'reason' must be a string")
    for flag in ("dry_run", "allow_duplicate_side_effects"):
        if not isinstance(body.get(flag, False), bool):
            raise _bad(f"field {flag!r} must be a boolean")
    return body


def _not_found(exc: Exception) -> JSONResponse:
    return JSONResponse({"error": {"status": 404, "message": str(exc), "type": type(exc).__name__}}, 404)


async def _answer(func: Any) -> JSONResponse:
    try:
        return JSONResponse(await run_in_threadpool(func))
    except (WorkflowNotFound, ScheduleNotFound) as exc:
        return _not_found(exc)


def _answer_of(result: dict[str, Any], status: int) -> JSONResponse:
    """A command's answer: what it did; a refusal also carries the API's error object."""
    if status != 200:
        result = {**result, "error": {"status": status, "message": result["message"],
                                      "type": "NotAuthorized" if status == 403 else "Refused"}}
    return JSONResponse(result, status)


async def workflows(request: Request) -> JSONResponse:
    """GET /api/v1/workflows: workflows, newest first (?status= repeatable, ?name= repeatable, ?limit=)."""
    await authenticate(request)
    _known(request, "status", "name", "limit")
    state = state_of(request)
    status = tuple(request.query_params.getlist("status"))
    names = tuple(request.query_params.getlist("name"))
    limit = _limit(request, 50)
    rows = await run_in_threadpool(functools.partial(workflow_list, state, status=status, names=names, limit=limit))
    return JSONResponse({"workflows": rows})


async def workflow(request: Request) -> JSONResponse:
    """GET /api/v1/workflows/{workflow_id}: the workflow, its nodes, edges and events (a unique prefix works)."""
    principal = await authenticate(request)
    _known(request)
    state = state_of(request)
    return await _answer(functools.partial(workflow_detail, state, request.path_params["workflow_id"], principal))


async def _command_request(request: Request, kind: str, commands: tuple[str, ...], fields: frozenset[str]
                           ) -> tuple[Principal, str, dict[str, Any]]:
    """The caller, the command (404 unless one of `commands`) and the checked body of a POST."""
    principal = await authenticate(request)
    command = request.path_params["command"]
    if command not in commands:
        raise HTTPException(404, f"unknown {kind} command {command!r} (known: {', '.join(commands)})")
    _known(request)
    return principal, command, _body(await json_object(request), fields)


async def workflow_action(request: Request) -> JSONResponse:
    """POST /api/v1/workflows/{workflow_id}/{command}: {reason, dry_run, allow_duplicate_side_effects}."""
    principal, command, body = await _command_request(request, "workflow", WORKFLOW_ACTIONS, _WORKFLOW_FIELDS)
    state = state_of(request)

    def run() -> tuple[dict[str, Any], bool]:
        result = workflow_command(state, request.path_params["workflow_id"], command, principal,
                                  reason=body.get("reason"), dry_run=body.get("dry_run", False),
                                  allow_duplicates=body.get("allow_duplicate_side_effects", False))
        authorized = result.ok or workflow_permitted(state, result.workflow_id, principal, command)
        return result.as_dict(), authorized

    try:
        result, authorized = await run_in_threadpool(run)
    except WorkflowNotFound as exc:
        return _not_found(exc)
    return _answer_of(result, 200 if result["outcome"] != "refused" else 409 if authorized else 403)


async def schedules(request: Request) -> JSONResponse:
    """GET /api/v1/schedules: every stored schedule, its state, next and last slot."""
    principal = await authenticate(request)
    _known(request)
    state = state_of(request)
    return JSONResponse({"schedules": await run_in_threadpool(schedule_list, state, principal)})


async def schedule(request: Request) -> JSONResponse:
    """GET /api/v1/schedules/{name}: the schedule, its recent slots with their jobs, its audit trail."""
    principal = await authenticate(request)
    _known(request, "limit")
    limit = _limit(request, 20)
    state = state_of(request)
    return await _answer(functools.partial(schedule_detail, state, request.path_params["name"], principal,
                                           limit=limit))


async def schedule_action(request: Request) -> JSONResponse:
    """POST /api/v1/schedules/{name}/{command}: pause, resume or trigger, {reason}."""
    principal, command, body = await _command_request(request, "schedule", SCHEDULE_ACTIONS, _SCHEDULE_FIELDS)
    state = state_of(request)
    try:
        result = await run_in_threadpool(functools.partial(schedule_command, state, request.path_params["name"],
                                                           command, principal, reason=body.get("reason")))
    except ScheduleNotFound as exc:
        return _not_found(exc)
    return _answer_of(result.as_dict(), 200 if result.ok else 403)


def routes() -> list[BaseRoute]:
    """The workflow and schedule routes of the API."""
    return [
        Route("/api/v1/workflows", workflows, methods=["GET"], name="api_workflows"),
        Route("/api/v1/workflows/{workflow_id}", workflow, methods=["GET"], name="api_workflow"),
        Route("/api/v1/workflows/{workflow_id}/{command}", workflow_action, methods=["POST"],
              name="api_workflow_action"),
        Route("/api/v1/schedules", schedules, methods=["GET"], name="api_schedules"),
        SegmentRoute("/api/v1/schedules/{name}", schedule, param="name", methods=["GET"], name="api_schedule"),
        SegmentRoute("/api/v1/schedules/{name}/{command}", schedule_action, param="name", methods=["POST"],
                     name="api_schedule_action"),
    ]
