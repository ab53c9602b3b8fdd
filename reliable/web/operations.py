"""Bulk operations of the API: filter -> count and a confirmation -> confirm -> run with progress.

    POST /api/v1/operations                  count: 201 with the confirmation token (shown once)
    GET  /api/v1/operations                  the recent ones, newest first (?limit=)
    GET  /api/v1/operations/{id}             one, with every counted job id and every result
    POST /api/v1/operations/{id}/confirm     {"confirm_token": ...} or {"counted_digest": ...}: 202, it runs
                                             in the background
    POST /api/v1/operations/{id}/cancel      stops a run before its next job (or drops a preview)

Every rule lives in `reliable.operations` (the engine) and `Control` (each job); this module only
authenticates, parses and maps errors to JSON. See docs/bulk-operations.md.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from ..access import Principal
from ..errors import ConfigError, OperationNotFound
from ..operations import Operation, Operations
from ..store.selection import filter_from_params, jobs_with_ids
from .auth import authenticate, state_of
from .bodies import json_object
from .inputs import query_int
from .queries import job_view

__all__ = ["operations_of", "routes"]

_BODY_KEYS = frozenset({"command", "filter", "reason", "options", "rate", "dry_run"})
_LIST_LIMIT = 200


def operations_of(request: Request) -> Operations:
    """The app's bulk operations engine (one per app: it owns the runs' threads), made on first use."""
    app_state = request.app.state
    engine: Operations | None = getattr(app_state, "reliable_operations", None)
    if engine is None:
        state = state_of(request)
        config = state.config
        engine = Operations(state.store, bulk_max=config.bulk_max, bulk_rate=config.bulk_rate,
                            confirm_ttl=config.confirm_ttl)
        app_state.reliable_operations = engine
    return engine


async def _shown(request: Request, op: Operation, principal: Principal, *, full: bool) -> dict[str, Any]:
    """The operation as `principal` may see it (`Operations.as_seen_by`: a search's text and the ids
    it matched outside its scope only to those who may search)."""
    seen = await run_in_threadpool(operations_of(request).as_seen_by, op, principal.reader)
    return seen.as_dict(full=full)


def _not_found(exc: OperationNotFound) -> JSONResponse:
    return JSONResponse({"error": {"status": 404, "message": str(exc), "type": type(exc).__name__}}, 404)


async def create(request: Request) -> JSONResponse:
    """POST /api/v1/operations: count the jobs a filter matches for a command; 201 with a confirmation token."""
    principal = await authenticate(request)
    body = await json_object(request)
    for key in sorted(set(body) - _BODY_KEYS):
        raise ConfigError(f"unknown field {key!r} (known: {', '.join(sorted(_BODY_KEYS))})")
    command, flt, options = body.get("command"), body.get("filter"), body.get("options") or {}
    if not isinstance(command, str):
        raise ConfigError("command is required: pause, stop, cancel, resume, restart, requeue (retry), "
                          "reconcile (resolve) or discard (purge)")
    if not isinstance(flt, dict) or not isinstance(options, dict):
        raise ConfigError("filter (and options, when given) must be JSON objects")
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise ConfigError("reason must be a string")
    job_filter = filter_from_params(flt, ignore=("exclude_discarded",))
    exclude_discarded = flt.get("exclude_discarded", False)
    if not isinstance(exclude_discarded, bool):
        raise ConfigError("filter.exclude_discarded must be true or false")
    if exclude_discarded:  # the dead-letter view: DEAD jobs discarded since their last change are left out
        job_filter = dataclasses.replace(job_filter, exclude_discarded=True)
    control = state_of(request).control_for(principal)
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise ConfigError("dry_run must be true or false")
    preview = await run_in_threadpool(functools.partial(
        operations_of(request).preview, control, command, job_filter, reason=reason, options=options,
        rate=body.get("rate"), dry_run=dry_run))
    answer = preview.as_dict()
    patterns = state_of(request).config.redact
    sample = await run_in_threadpool(functools.partial(jobs_with_ids, control.store, answer["sample"],
                                                       reader=principal.reader))
    # The sample's jobs themselves, so a person (or the CLI) sees what the confirmation acts on.
    answer["sample_jobs"] = [job_view(job, principal, patterns) for job in sample]
    if dry_run:
        answer["confirm_token"] = None  # counted only: nothing to confirm
    return JSONResponse(answer, 200 if dry_run else 201)


async def recent(request: Request) -> JSONResponse:
    """GET /api/v1/operations: the recent operations, newest first (without their job ids and results)."""
    principal = await authenticate(request)
    limit = query_int(request, "limit", 50, _LIST_LIMIT)
    found = await run_in_threadpool(operations_of(request).recent, limit=limit)
    return JSONResponse({"operations": [await _shown(request, op, principal, full=False) for op in found]})


async def detail(request: Request) -> JSONResponse:
    """GET /api/v1/operations/{id}: one operation, with its counted job ids and every result so far."""
    principal = await authenticate(request)
    try:
        op = await run_in_threadpool(operations_of(request).get, request.path_params["operation_id"])
    except OperationNotFound as exc:
        return _not_found(exc)
    return JSONResponse(await _shown(request, op, principal, full=True))


async def confirm(request: Request) -> JSONResponse:
    """POST /api/v1/operations/{id}/confirm {"confirm_token"} or {"counted_digest"}: start the run; 202
    with the operation. The token is the one the preview returned; without it, the operation's
    `counted_digest` (its creator confirming the set it was shown: `confirm_counted`)."""
    principal = await authenticate(request)
    body = await json_object(request)
    token, digest = body.get("confirm_token"), body.get("counted_digest")
    unknown = sorted(set(body) - {"confirm_token", "counted_digest"})
    if unknown:
        raise ConfigError(f"unknown field {unknown[0]!r} (known: confirm_token, counted_digest)")
    if (token is None) == (digest is None):
        raise ConfigError("confirm_token is required: the token the preview returned (or, instead, counted_digest: "
                          "the operation's counted_digest); give one of them")
    proof = token if token is not None else digest
    if not isinstance(proof, str) or not proof:
        raise ConfigError(f"{'confirm_token' if token is not None else 'counted_digest'} must be a non-empty string")
    control = state_of(request).control_for(principal)
    engine = operations_of(request)
    operation_id = request.path_params["operation_id"]
    call = (functools.partial(engine.confirm, operation_id, proof, control, admin=principal.unrestricted)
            if token is not None else functools.partial(engine.confirm_counted, operation_id, proof, control))
    try:
        op = await run_in_threadpool(call)
    except OperationNotFound as exc:
        return _not_found(exc)
    return JSONResponse(await _shown(request, op, principal, full=False), 202)


async def cancel(request: Request) -> JSONResponse:
    """POST /api/v1/operations/{id}/cancel: stop the run before its next job, or drop a preview."""
    principal = await authenticate(request)
    for key in sorted(await json_object(request)):
        raise ConfigError(f"unknown field {key!r}: cancel takes no fields")
    if not principal.may_act:
        raise HTTPException(403, f"{principal.name!r} may run no command (a read-only role)")
    try:
        op = await run_in_threadpool(operations_of(request).cancel, request.path_params["operation_id"],
                                     principal.name, admin=principal.unrestricted)
    except OperationNotFound as exc:
        return _not_found(exc)
    return JSONResponse(await _shown(request, op, principal, full=False))


def routes() -> list[BaseRoute]:
    """The bulk operations' routes."""
    return [
        Route("/api/v1/operations", create, methods=["POST"], name="api_create"),
        Route("/api/v1/operations", recent, methods=["GET"], name="api_recent"),
        Route("/api/v1/operations/{operation_id}", detail, methods=["GET"], name="api_detail"),
        Route("/api/v1/operations/{operation_id}/confirm", confirm, methods=["POST"], name="api_confirm"),
        Route("/api/v1/operations/{operation_id}/cancel", cancel, methods=["POST"], name="api_cancel"),
    ]
