"""Queues in the API: their figures, and pausing / resuming a whole queue.

    GET  /api/v1/queues                  per queue: jobs per state, oldest due PENDING job, finished
                                         and failed over the window, its pause (if any), and its
                                         depths in RabbitMQ when the app has a broker
    POST /api/v1/queues/{queue}/pause    {"reason": ...}: pause the queue (an operator's command)
    POST /api/v1/queues/{queue}/resume   {"reason": ...}: resume it

Every rule lives in `reliable.queue_pauses` (operators policy, audit, reason); this module only
authenticates, parses and shapes JSON. A paused queue's deliveries wait at the workers
(`reliable.worker.paused`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from .. import queue_pauses
from .auth import authenticate, state_of
from .bodies import json_object
from .state import WebState

__all__ = ["COMMANDS", "broker_depths_of", "queue_answer", "routes"]

logger = logging.getLogger("reliable.web")

#: The queue commands of POST /api/v1/queues/{queue}/{command}.
COMMANDS: tuple[str, ...] = ("pause", "resume")


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


def queue_answer(state: WebState, pauses: queue_pauses.QueueState) -> dict[str, Any]:
    """GET /api/v1/queues's answer (the console's queues page shows the same): the store's figures
    and pauses (`queue_pauses.queue_figures`), with each queue's RabbitMQ depths as `broker`."""
    figures = queue_pauses.queue_figures(state.overview(), pauses)
    depths = broker_depths_of(state.broker, [row["queue"] for row in figures["queues"]])
    for row in figures["queues"]:
        depth = None if depths is None else depths.get(row["queue"])
        row["broker"] = None if depth is None else dataclasses.asdict(depth)
    return figures


async def queues(request: Request) -> JSONResponse:
    """GET /api/v1/queues: per queue, its figures and its pause (`queue_pauses.queue_figures`)."""
    await authenticate(request)
    if request.query_params:
        name = next(iter(request.query_params))
        raise HTTPException(400, f"unknown parameter {name!r} (known: none)")
    state = state_of(request)
    return JSONResponse(await run_in_threadpool(lambda: queue_answer(state, queue_pauses.paused(state.store))))


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
        Route("/api/v1/queues/{queue}/{command}", command, methods=["POST"], name="api_queue_command"),
    ]
