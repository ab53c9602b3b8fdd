"""The fleet: `GET /api/v1/workers` and the console's workers page (`/workers`).

Both read `reliable.store.worker_views.fleet` (the store's worker-process records, so they work
across hosts): every process not marked exited with its host, pid, queues, threads, the jobs it
holds now, start, last heartbeat, supervisor and restarts, and the most recent exits. Any
authenticated role reads them: they carry no job values (ids, queues, actors and states only).
"""

from __future__ import annotations

import functools

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..store.processes import LIVE_WITHIN
from ..store.worker_views import EXITED_SHOWN, fleet
from .auth import authenticate, state_of

__all__ = ["PARAMS", "routes"]

#: The query parameters of GET /api/v1/workers (and of the page).
PARAMS = ("host", "exited")


def _params(request: Request) -> tuple[str | None, int]:
    for name in request.query_params:
        if name not in PARAMS:
            raise HTTPException(400, f"unknown parameter {name!r} (known: {', '.join(PARAMS)})")
    host = request.query_params.get("host") or None
    raw = request.query_params.get("exited", str(EXITED_SHOWN))
    if not raw.isdigit() or int(raw) > 1000:
        raise HTTPException(400, f"parameter 'exited' must be an integer from 0 to 1000, not {raw!r}")
    return host, int(raw)


async def api_workers(request: Request) -> JSONResponse:
    """GET /api/v1/workers: the live worker processes and the recent exits (?host=, ?exited=N)."""
    await authenticate(request)
    host, exited = _params(request)
    found = await run_in_threadpool(functools.partial(fleet, state_of(request).store, host=host, exited=exited))
    return JSONResponse(found.as_dict())


async def workers_page(request: Request) -> Response:
    """GET /workers: the fleet, one row per process, and the recent exits."""
    from .console import render

    principal = await authenticate(request)
    host, exited = _params(request)
    found = await run_in_threadpool(functools.partial(fleet, state_of(request).store, host=host, exited=exited))
    return render(request, "workers.html", principal=principal, fleet=found, host=host, live_within=LIVE_WITHIN)


def routes() -> list[BaseRoute]:
    """The fleet's routes: the API's and the console's."""
    return [
        Route("/api/v1/workers", api_workers, methods=["GET"], name="api_workers"),
        Route("/workers", workers_page, methods=["GET"], name="workers"),
    ]
