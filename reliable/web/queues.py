"""Queues in the API: their figures, and pausing / resuming a whole queue.

    GET  /api/v1/queues                  a page of the queues (by name: ?limit=, ?cursor=, ?search=
                                         part of a name), per queue: jobs per state, oldest due
                                         PENDING job, finished and failed over the window, wait and
                                         run p50/p95, its pause (if any), and its depths in RabbitMQ
                                         when the app has a broker
    POST /api/v1/queues/{queue}/pause    {"reason": ...}: pause the queue (an operator's command)
    POST /api/v1/queues/{queue}/resume   {"reason": ...}: resume it

Every rule lives in `reliable.queue_pauses` (operators policy, audit, reason); this module only
authenticates, parses and shapes JSON. A paused queue's deliveries wait at the workers
(`reliable.worker.paused`).
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from .. import queue_pauses
from ..store.job_stats import latency
from .auth import authenticate, state_of
from .bodies import json_object
from .inputs import query_cursor, query_int, query_one
from .paths import SegmentRoute
from .state import WebState

__all__ = ["COMMANDS", "MAX_PAGE", "PAGE", "PARAMS", "broker_depths_of", "queue_answer", "read_page", "routes"]

logger = logging.getLogger("reliable.web")

#: The queue commands of POST /api/v1/queues/{queue}/{command}.
COMMANDS: tuple[str, ...] = ("pause", "resume")
#: Queues per page by default (the API's and the console's), and at most.
PAGE = 100
MAX_PAGE = 1000
#: The query parameters of GET /api/v1/queues (and of the console's page).
PARAMS = ("limit", "cursor", "search")


def broker_depths_of(broker: Any, queues: list[str]) -> dict[str, Any] | None:
    """Each queue's depths in RabbitMQ when the app was given a RabbitMQ broker (`reliable web
    --broker`), by passive declarations; None without one, or when RabbitMQ does not answer (logged)."""
    params = getattr(broker, "parameters", None)
    if params is None or not queues:
        return None
    from ..collector import broker_depths
    from ..rabbitmq.reach import explain, nodes_of

    try:
        return broker_depths(params if isinstance(params, list) else [params], queues)
    except Exception as exc:  # the store's figures are still answered
        logger.warning("queues: RabbitMQ's depths could not be read: %s", explain(exc, nodes_of(broker)))
        return None


def queue_answer(state: WebState, pauses: queue_pauses.QueueState, *, limit: int = PAGE, cursor: str | None = None,
                 search: str | None = None) -> dict[str, Any]:
    """GET /api/v1/queues's answer (the console's queues page shows the same): a page of `limit`
    queues by name after `cursor` (those whose name holds `search`, case-insensitive), with the
    store's figures and pauses (`queue_pauses.queue_figures`), wait and run p50/p95 read for the
    page's queues only, and each queue's RabbitMQ depths as `broker`; `total` (the queues matching)
    and `next_cursor` (None: the last page)."""
    overview = state.overview()
    names = queue_pauses.queue_names(overview, pauses)
    if search:
        needle = search.casefold()
        names = [name for name in names if needle in name.casefold()]
    total = len(names)
    start = 0 if cursor is None else bisect.bisect_right(names, cursor)
    shown = names[start:start + limit]
    more = start + limit < len(names)
    # p50/p95 of the page's queues only (a few rows each), not of every queue and actor, and their
    # oldest due PENDING job (the overview reads those of its busiest queues only)
    figures = queue_pauses.queue_figures(
        dataclasses.replace(overview.with_queues(state.store, shown),
                            latency=latency(state.store, window="1h", queues=shown, actors=0)),
        pauses, shown)
    depths = broker_depths_of(state.broker, shown)
    for row in figures["queues"]:
        depth = None if depths is None else depths.get(row["queue"])
        row["broker"] = None if depth is None else dataclasses.asdict(depth)
    figures["total"] = total
    figures["next_cursor"] = shown[-1] if more and shown else None
    return figures


def read_page(request: Request, known: tuple[str, ...] = ()) -> tuple[dict[str, Any], queue_pauses.QueueState]:
    """`queue_answer` for the request's ?limit=, ?cursor= and ?search= (a 400 for another parameter
    than those and `known`), and the pauses it read; run in a thread."""
    for name in request.query_params:
        if name not in PARAMS and name not in known:
            raise HTTPException(400, f"unknown parameter {name!r} (known: {', '.join((*PARAMS, *known))})")
    limit, cursor = query_int(request, "limit", PAGE, MAX_PAGE), query_cursor(request)
    search = (query_one(request, "search") or "").strip() or None
    # A page's cursor is the last queue name of the page before; a search is part of a name:
    # either can only hold what a queue's name can (queue_pauses.queue_name_problem).
    for name, value in (("cursor", cursor), ("search", search)):
        problem = None if value is None else queue_pauses.queue_name_problem(value, blank=name == "cursor")
        if problem is not None:
            raise HTTPException(400, f"parameter {name!r} cannot be part of a queue's name: {problem}")
    state = state_of(request)
    pauses = queue_pauses.paused(state.store)
    return queue_answer(state, pauses, limit=limit, cursor=cursor, search=search), pauses


async def queues(request: Request) -> JSONResponse:
    """GET /api/v1/queues: a page of the queues, each with its figures and its pause (`queue_answer`)."""
    await authenticate(request)
    figures, _ = await run_in_threadpool(read_page, request)
    return JSONResponse(figures)


async def command(request: Request) -> JSONResponse:
    """POST /api/v1/queues/{queue}/{command}: pause or resume a queue, as the authenticated principal."""
    principal = await authenticate(request)
    name, queue = request.path_params["command"], request.path_params["queue"]
    if name not in COMMANDS:
        raise HTTPException(404, f"unknown queue command {name!r} (known: {', '.join(COMMANDS)})")
    body = await json_object(request)
    unknown = sorted(set(body) - {"reason"})
    if unknown:
        raise HTTPException(400, f"unknown field {unknown[0]!r} (known: reason)")
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise HTTPException(400, "field 'reason' must be a string")
    state = state_of(request)
    act = queue_pauses.pause if name == "pause" else queue_pauses.resume

    def run() -> dict[str, Any]:
        changed = act(state.store, queue, reason=reason, identity=principal.operator(state.config.host),
                      operators=principal.operators)
        return {"queue": queue, "command": name, "changed": changed,
                "paused": queue_pauses.paused(state.store).get(queue) is not None, "operator": principal.name}

    return JSONResponse(await run_in_threadpool(run))


def routes() -> list[BaseRoute]:
    """The queues' routes (GET /api/v1/queues replaces the overview-only one of `api`)."""
    return [
        Route("/api/v1/queues", queues, methods=["GET"], name="api_queues"),
        # the queue is one raw path segment: a name holding "/" is reached encoded (%2F)
        SegmentRoute("/api/v1/queues/{queue}/{command}", command, param="queue", methods=["POST"],
                     name="api_queue_command"),
    ]
