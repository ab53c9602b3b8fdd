"""The actors' concurrency limits, as operators change them (issue 42): the API and the queues page's form.

    GET  /api/v1/limits                           a page of the actors with a concurrency limit: declared,
                                                  effective now, the operator's ceiling (?limit=, ?cursor=)
    POST /api/v1/limits/{actor}/concurrency       {"concurrency": N or null, "reason": ...}: cap the actor
                                                  at N (1 to its declared concurrency), or clear the cap
    POST /queues/limits/{actor}                   the queues page's form; back to /queues#limits

Every rule (bounds, policy, reason, audit) lives in `reliable.limits.operator`; the reads in
`reliable.store.limit_settings`. Any authenticated role reads the limits (names and numbers only).
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..access import Principal
from ..errors import ConfigError, NotAuthorized, ReliableError
from ..limits import operator as limit_operator
from ..store.limit_settings import list_limits
from .auth import authenticate, state_of
from .bodies import command_body
from .inputs import query_cursor, query_int, query_one

__all__ = ["PAGE", "limits_section", "routes"]

#: Actors per page (API default and the queues page), and at most.
PAGE = 100
MAX_PAGE = 1000


def _page(request: Request, default: int = PAGE) -> tuple[int, str | None]:
    return query_int(request, "limit", default, MAX_PAGE), query_one(request, "limits_after") or query_cursor(request)


async def api_limits(request: Request) -> JSONResponse:
    """GET /api/v1/limits: a page of the actors' concurrency limits."""
    await authenticate(request)
    for name in request.query_params:
        if name not in ("limit", "cursor"):
            raise HTTPException(400, f"unknown parameter {name!r} (known: limit, cursor)")
    limit, cursor = _page(request)
    store = state_of(request).store
    rows, after = await run_in_threadpool(lambda: list_limits(store, limit=limit, cursor=cursor))
    return JSONResponse({"limits": [row.as_dict() for row in rows], "next_cursor": after})


def _parse_concurrency(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise HTTPException(400, f"field 'concurrency' must be an integer or null, not {value!r}")
    return value


async def api_set(request: Request) -> JSONResponse:
    """POST /api/v1/limits/{actor}/concurrency: cap (or uncap) an actor's concurrency as the principal."""
    principal = await authenticate(request)
    actor = request.path_params["actor"]
    body, reason = await command_body(request, "concurrency")
    if "concurrency" not in body:
        raise HTTPException(400, "field 'concurrency' is required (an integer, or null to clear the cap)")
    concurrency = _parse_concurrency(body["concurrency"])
    state = state_of(request)
    before, after = await run_in_threadpool(lambda: limit_operator.set_concurrency(
        state.store, actor, concurrency, reason=reason, identity=principal.operator(state.config.host),
        operators=principal.operators))
    return JSONResponse({"actor": actor, "before": before.as_dict(), "after": after.as_dict(),
                         "operator": principal.name})


def limits_section(request: Request, principal: Principal) -> dict[str, Any]:
    """What the queues page shows of the limits (run in a thread): a page of them (after ?limits_after=:
    the page's own ?limit= and ?cursor= page the queues), each with whether the principal may change
    it, and the next page's URL."""
    limit, cursor = PAGE, query_one(request, "limits_after") or None
    store = state_of(request).store
    rows, after = list_limits(store, limit=limit, cursor=cursor)
    may = {row.actor for row in rows if limit_operator.allowed(store, principal.operators, principal.name, row.actor)}
    next_url = None if after is None else f"{request.url_for('queues')}?limits_after={after}#limits"
    return {"rows": rows, "may": may, "next_url": next_url}


async def limit_action(request: Request) -> Response:
    """POST /queues/limits/{actor}: the queues page's form (concurrency empty, or the Clear button: clear)."""
    from .console import flash

    principal = await authenticate(request)  # checks the CSRF token of a session
    actor = request.path_params["actor"]
    form = await request.form()
    reason = str(form.get("reason") or "").strip() or None
    raw = str(form.get("concurrency") or "").strip()
    state = state_of(request)
    try:
        if form.get("clear") or not raw:
            concurrency = None
        elif raw.isdigit():
            concurrency = int(raw)
        else:
            raise ConfigError(f"field 'concurrency': expected a whole number, not {raw[:20]!r}")
        _, after = await run_in_threadpool(lambda: limit_operator.set_concurrency(
            state.store, actor, concurrency, reason=reason, identity=principal.operator(state.config.host),
            operators=principal.operators))
    except NotAuthorized:
        raise
    except ReliableError as exc:
        flash(request, "error", f"concurrency of {actor} not changed: {exc}")
    else:
        flash(request, "ok", f"{actor}: concurrency {after.effective} of {after.declared} declared"
              + ("" if after.ceiling is not None else " (the operator's cap cleared)") + ".")
    return RedirectResponse(f"{request.url_for('queues')}#limits", 303)


def routes() -> list[BaseRoute]:
    """The limits' routes: the API's and the queues page's form."""
    return [
        Route("/api/v1/limits", api_limits, methods=["GET"], name="api_limits"),
        Route("/api/v1/limits/{actor}/concurrency", api_set, methods=["POST"], name="api_limit_set"),
        Route("/queues/limits/{actor}", limit_action, methods=["POST"], name="limit_action"),
    ]
