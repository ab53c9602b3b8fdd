"""The fleet: `GET /api/v1/workers`, the console's workers page (`/workers`), and quieting, resuming
or stopping a worker process.

    GET  /api/v1/workers                          a page of the live processes (?limit=, ?cursor=,
                                                  ?host=) with their busy threads, and the recent
                                                  exits (?exited=N)
    POST /api/v1/workers/{worker_id}/{command}    {"reason": ...}: quiet, resume or stop that process
    GET  /workers                                 the same as a page, with a quiet (a resume, when it is
                                                  quiet) and a stop form per process for a principal
                                                  the operators policy allows
    POST /workers/{worker_id}/actions/{command}   the forms' target; back to /workers

The reads are `reliable.store.worker_views.fleet` (the store's worker-process records, so they work
across hosts): every process not marked exited with its host, pid, queues, threads, what each busy
thread runs now, start, last heartbeat, supervisor and restarts, its last command, and the most
recent exits. Any authenticated role reads them: they carry no job values (ids, queues, actors and
states only). Every rule of a command (policy, reason, audit, a process that exited or a resume of
one not quiet: 409) is `reliable.process_commands`'.
"""

from __future__ import annotations

import functools

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .. import process_commands
from ..errors import NotAuthorized, ReliableError
from ..store.processes import LIVE_WITHIN
from ..store.worker_views import EXITED_SHOWN, MAX_PAGE, PAGE, Fleet, fleet
from .auth import authenticate, state_of
from .bodies import command_body
from .inputs import query_cursor, query_int, query_one

__all__ = ["CONSOLE_PAGE", "PARAMS", "routes"]

#: The query parameters of GET /api/v1/workers (and of the page).
PARAMS = ("host", "exited", "limit", "cursor", "include")
#: What `?include=` may add to GET /api/v1/workers: `held_jobs`, deprecated (the jobs of `busy_threads` again).
INCLUDES = ("held_jobs",)


#: Live processes per page of the console's workers page (the API's default is `worker_views.PAGE`):
#: each row lists its busy threads' jobs, so 100 processes of 16 threads weigh about a megabyte of HTML.
CONSOLE_PAGE = 25


def _read(request: Request, page: int = PAGE) -> Fleet:
    for name in request.query_params:
        if name not in PARAMS:
            raise HTTPException(400, f"unknown parameter {name!r} (known: {', '.join(PARAMS)})")
    host = query_one(request, "host") or None
    exited = query_int(request, "exited", EXITED_SHOWN, 1000, low=0)
    limit = query_int(request, "limit", page, MAX_PAGE)
    cursor = query_cursor(request)
    return functools.partial(fleet, state_of(request).store, host=host, exited=exited, limit=limit,
                             cursor=cursor)()


async def api_workers(request: Request) -> JSONResponse:
    """GET /api/v1/workers: a page of the live worker processes and the recent exits (`?include=held_jobs`:
    the deprecated `held_jobs` list too)."""
    await authenticate(request)
    include = query_one(request, "include")
    if include is not None and include not in INCLUDES:
        raise HTTPException(400, f"include must be one of {', '.join(INCLUDES)}, not {include!r}")
    found = await run_in_threadpool(_read, request)
    return JSONResponse(found.as_dict(held_jobs=include == "held_jobs"))


async def api_command(request: Request) -> JSONResponse:
    """POST /api/v1/workers/{worker_id}/{command}: quiet, resume or stop a process, as the authenticated
    principal."""
    principal = await authenticate(request)
    verb, worker_id = request.path_params["command"], request.path_params["worker_id"]
    if verb not in process_commands.VERBS:
        raise HTTPException(404, f"unknown worker command {verb!r} (known: {', '.join(process_commands.VERBS)})")
    _, reason = await command_body(request)
    state = state_of(request)
    changed = await run_in_threadpool(lambda: process_commands.command(
        state.store, worker_id, verb, reason=reason, identity=principal.operator(state.config.host),
        operators=principal.operators))
    return JSONResponse({"worker_id": worker_id, "command": verb, "changed": changed, "operator": principal.name})


async def workers_page(request: Request) -> Response:
    """GET /workers: a page of the fleet, one row per process with its busy threads, and the recent exits."""
    from .console import render

    principal = await authenticate(request)
    found = await run_in_threadpool(_read, request, CONSOLE_PAGE)
    may: dict[str, tuple[str, ...]] = {
        view.process.worker_id: tuple(verb for verb in process_commands.VERBS
                                      if process_commands.allowed(principal.operators, principal.name, verb,
                                                                  view.process))
        for view in found.live}
    params = {k: v for k, v in request.query_params.items() if k != "cursor"}
    next_url = None if found.next_cursor is None else \
        str(request.url.include_query_params(**params, cursor=found.next_cursor))
    first_url = str(request.url.remove_query_params("cursor")) if "cursor" in request.query_params else None
    # the links' prefixes once per page, not a url_for per link (each walks the app's routes: 25
    # processes of a dozen busy threads each made it most of the page's time, issue 42)
    return render(request, "workers.html", principal=principal, fleet=found, host=params.get("host"),
                  live_within=LIVE_WITHIN, may=may, next_url=next_url, first_url=first_url,
                  jobs_url=str(request.url_for("jobs")), workers_url=str(request.url_for("workers")))


async def worker_action(request: Request) -> Response:
    """POST /workers/{worker_id}/actions/{command}: quiet, resume or stop a process as the signed-in
    principal."""
    from .console import flash

    principal = await authenticate(request)  # checks the CSRF token of a session
    verb, worker_id = request.path_params["command"], request.path_params["worker_id"]
    if verb not in process_commands.VERBS:
        raise HTTPException(404, f"no worker command {verb!r} (known: {', '.join(process_commands.VERBS)})")
    form = await request.form()
    reason = str(form.get("reason") or "").strip() or None
    state = state_of(request)
    try:
        changed = await run_in_threadpool(lambda: process_commands.command(
            state.store, worker_id, verb, reason=reason, identity=principal.operator(state.config.host),
            operators=principal.operators))
    except NotAuthorized:
        raise
    except ReliableError as exc:
        flash(request, "error", f"{verb} of worker {worker_id} refused: {exc}")
    else:
        flash(request, "ok", _done(worker_id, verb, changed))
    return RedirectResponse(str(request.url_for("workers")), 303)


def _done(worker_id: str, verb: str, changed: bool) -> str:
    if not changed:
        return f"worker {worker_id} was already told to {verb} (or to stop): nothing changed."
    if verb == "quiet":
        return f"worker {worker_id} told to take no new message; its running jobs finish (within a heartbeat)."
    if verb == "resume":
        return f"worker {worker_id} resumed: it takes messages again (within a heartbeat)."
    return f"worker {worker_id} told to stop after its running jobs (within a heartbeat)."


def routes() -> list[BaseRoute]:
    """The fleet's routes: the API's and the console's."""
    return [
        Route("/api/v1/workers", api_workers, methods=["GET"], name="api_workers"),
        Route("/api/v1/workers/{worker_id}/{command}", api_command, methods=["POST"], name="api_worker_command"),
        Route("/workers", workers_page, methods=["GET"], name="workers"),
        Route("/workers/{worker_id}/actions/{command}", worker_action, methods=["POST"], name="worker_action"),
    ]


