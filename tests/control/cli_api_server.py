"""The HTTP API the CLI's `--api` tests talk to: the real app, served by uvicorn on a free port.

`add_contract_routes(app)` adds stand-ins, faithful to the API contract and built on the real
pieces (`Control`, `reliable.store.selection`, `reliable.web.queries`, the app's authentication and error
handlers), for the routes `create_app` does not serve yet (they are being built on other
branches). A route the app already serves is left alone, so once those branches are merged the
tests run against the real handlers with no change.
"""

from __future__ import annotations

import functools
import re
import secrets
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from reliable.errors import ConfigError, JobNotFound, ReliableError
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.selection import JobFilter, count_jobs, page_jobs, select_jobs, statuses
from reliable.web.auth import authenticate, state_of
from reliable.web.queries import job_detail, job_view

__all__ = ["add_contract_routes", "serve"]

COMMANDS = ("pause", "stop", "cancel", "resume", "restart", "requeue", "retry", "reconcile", "discard")
SAMPLE = 5


@contextmanager
def serve(app: Starlette) -> Iterator[str]:
    """Serve `app` on a free port in a thread; its base URL. Stopped on exit."""
    # Bound and listening before uvicorn starts: an early request waits in the backlog, never fails.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        assert httpx.get(f"{url}/api/v1/whoami", timeout=30).status_code == 401  # it answers
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def _key(path: str) -> str:
    return re.sub(r"\{[^}]*\}", "{}", path)


def add_contract_routes(app: Starlette) -> list[str]:
    """Add the stand-ins of the routes `app` does not serve; the paths added."""
    served = {(_key(r.path), m) for r in app.routes if isinstance(r, Route) for m in (r.methods or ())}
    added = []
    for route in _routes():
        if not any((_key(route.path), m) in served for m in route.methods or ()):
            app.router.routes.append(route)
            added.append(route.path)
    app.state.cli_test_operations = {}
    return added


def _routes() -> list[Route]:
    return [
        Route("/api/v1/jobs", _listing(()), methods=["GET"]),
        Route("/api/v1/dlq", _listing((JobStatus.DEAD,), exclude_discarded=True), methods=["GET"]),
        Route("/api/v1/review", _listing((JobStatus.REVIEW,)), methods=["GET"]),
        Route("/api/v1/jobs/{job_id}", _detail, methods=["GET"]),
        Route("/api/v1/jobs/{job_id}/events", _events, methods=["GET"]),
        Route("/api/v1/jobs/{job_id}/{command}", _command, methods=["POST"]),
        Route("/api/v1/operations", _create_operation, methods=["POST"]),
        Route("/api/v1/operations/{operation_id}", _operation, methods=["GET"]),
        Route("/api/v1/operations/{operation_id}/confirm", _confirm_operation, methods=["POST"]),
        Route("/api/v1/operations/{operation_id}/cancel", _cancel_operation, methods=["POST"]),
    ]


def _float(value: Any) -> float | None:
    if value in (None, ""):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"expected epoch seconds, got {value!r}") from None


def _filter(get: Callable[[str], Any], states: list[str], ids: list[str]) -> JobFilter:
    return JobFilter(job_ids=tuple(ids), statuses=statuses(states), queue=get("queue") or None,
                     actor=get("actor") or None, error_class=get("error_class") or None, owner=get("owner") or None,
                     workflow_id=get("workflow") or None, changed_since=_float(get("changed_since")),
                     changed_until=_float(get("changed_until")), search=get("q") or None)


def _resolve(store: StateStore, given: str) -> str:
    if store.find(given) is not None:
        return given
    found = store.job_ids_with_prefix(given, limit=11) if len(given) >= 6 else []
    if not found:
        raise JobNotFound(given)
    if found[0] == given or len(found) == 1:
        return found[0]
    raise HTTPException(409, f"job id prefix {given!r} matches several jobs: {', '.join(found[:10])}")


def _listing(fixed: tuple[JobStatus, ...], *, exclude_discarded: bool = False) -> Callable[[Request], Any]:
    async def listing(request: Request) -> JSONResponse:
        principal = await authenticate(request)
        state = state_of(request)
        query = request.query_params
        flt = _filter(query.get, query.getlist("state"), [])
        if fixed:
            flt = JobFilter(**{**flt.__dict__, "statuses": fixed, "exclude_discarded": exclude_discarded})
        limit = int(query.get("limit") or 50)
        if not 1 <= limit <= 500:
            raise ConfigError(f"limit must be 1..500, got {limit}")
        page = await run_in_threadpool(functools.partial(page_jobs, state.store, flt, reader=principal.reader,
                                                          limit=limit, cursor=query.get("cursor")))
        return JSONResponse({"jobs": [job_view(j, principal, state.config.redact) for j in page.jobs],
                             "next_cursor": page.next_cursor})

    return listing


async def _detail(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    state = state_of(request)
    query = request.query_params
    job_id = await run_in_threadpool(_resolve, state.store, request.path_params["job_id"])
    limit = query.get("event_limit")
    detail = await run_in_threadpool(job_detail, state.control_for(principal), job_id, principal, state.config.redact,
                                     events=query.getlist("event") or None, since=_float(query.get("since")),
                                     event_limit=int(limit) if limit else 200)
    return JSONResponse(detail)


async def _events(request: Request) -> JSONResponse:
    await authenticate(request)
    store = state_of(request).store
    query = request.query_params
    job_id = await run_in_threadpool(_resolve, store, request.path_params["job_id"])
    limit = query.get("limit")
    found = await run_in_threadpool(store.events, job_id, events=query.getlist("event") or None,
                                    since=_float(query.get("since")), limit=int(limit) if limit else None)
    return JSONResponse({"events": [e.as_dict() for e in found]})


def _options(command: str, body: dict[str, Any]) -> dict[str, Any]:
    if command in ("restart", "requeue", "retry"):
        return {"allow_duplicate_side_effects": bool(body.get("allow_duplicate_side_effects"))}
    if command == "reconcile":
        return {"resolution": str(body.get("resolution") or "")}
    return {}


async def _command(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    state = state_of(request)
    command = request.path_params["command"]
    if command not in COMMANDS:
        raise HTTPException(404, f"unknown command {command!r}")
    body = await request.json() if await request.body() else {}
    job_id = await run_in_threadpool(_resolve, state.store, request.path_params["job_id"])
    method = getattr(state.control_for(principal), "requeue" if command == "retry" else command)
    result = await run_in_threadpool(method, job_id, reason=body.get("reason"), dry_run=bool(body.get("dry_run")),
                                     **_options(command, body))
    return JSONResponse(result.as_dict())


def _public(op: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in op.items() if not k.startswith("_")}


async def _create_operation(request: Request) -> JSONResponse:
    principal = await authenticate(request)
    if not principal.may_act:
        raise HTTPException(403, f"{principal.name} ({principal.role}) may not run commands")
    state = state_of(request)
    body = await request.json()
    command = body.get("command")
    if command not in COMMANDS:
        raise ConfigError(f"unknown command {command!r}")
    given = body.get("filter") or {}
    flt = _filter(given.get, list(given.get("state") or []), list(given.get("ids") or []))
    if flt.is_empty:
        raise ConfigError("a bulk operation needs a filter")
    total = await run_in_threadpool(functools.partial(count_jobs, state.store, flt, reader=principal.reader))
    sample = await run_in_threadpool(functools.partial(select_jobs, state.store, flt, reader=principal.reader,
                                                       limit=SAMPLE))
    operation_id = secrets.token_hex(8)
    op = {"operation_id": operation_id, "command": command, "status": "awaiting_confirmation", "total": total,
          "done": 0, "counts": {}, "confirm_token": secrets.token_urlsafe(12),
          "expires_at": state.store.now() + state.config.confirm_ttl,
          "sample": [job_view(j, principal, state.config.redact) for j in sample],
          "_filter": flt, "_principal": principal, "_reason": body.get("reason"),
          "_options": _options(command, body.get("options") or {}), "_jobs": []}
    request.app.state.cli_test_operations[operation_id] = op
    return JSONResponse(_public(op), 201)


def _op(request: Request) -> dict[str, Any]:
    op: dict[str, Any] | None = request.app.state.cli_test_operations.get(request.path_params["operation_id"])
    if op is None:
        raise HTTPException(404, "no such operation")
    return op


async def _confirm_operation(request: Request) -> JSONResponse:
    await authenticate(request)
    op = _op(request)
    body = await request.json()
    if op["status"] != "awaiting_confirmation" or body.get("confirm_token") != op["confirm_token"]:
        raise HTTPException(409, "not awaiting this confirmation")
    found = await run_in_threadpool(functools.partial(select_jobs, state_of(request).store, op["_filter"],
                                                      reader=op["_principal"].reader, limit=None))
    op["_jobs"] = [j.job_id for j in found]
    op["total"] = len(op["_jobs"])
    op["status"] = "running" if op["_jobs"] else "finished"
    return JSONResponse(_public(op), 202)


def _step(control: Any, op: dict[str, Any]) -> None:
    job_id = op["_jobs"][op["done"]]
    command = op["command"]
    try:
        outcome = getattr(control, "requeue" if command == "retry" else command)(
            job_id, reason=op["_reason"], **op["_options"]).outcome
    except ReliableError:
        outcome = "refused"
    op["counts"][outcome] = op["counts"].get(outcome, 0) + 1
    op["done"] += 1
    if op["done"] == op["total"]:
        op["status"] = "finished"


async def _operation(request: Request) -> JSONResponse:
    await authenticate(request)
    op = _op(request)
    if op["status"] == "running":  # one job per poll: progress the client can see, deterministically
        await run_in_threadpool(_step, state_of(request).control_for(op["_principal"]), op)
    return JSONResponse(_public(op))


async def _cancel_operation(request: Request) -> JSONResponse:
    await authenticate(request)
    op = _op(request)
    if op["status"] not in ("awaiting_confirmation", "running"):
        raise HTTPException(409, f"operation is {op['status']}")
    op["status"] = "cancelled"
    return JSONResponse(_public(op))
