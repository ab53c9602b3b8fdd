"""The JSON API under /api/v1: thin handlers over `Control`, the store and `reliable.store.selection`.

Every handler authenticates first (`auth.authenticate`), runs the store's blocking calls in the
thread pool, and leaves every rule of what a command may do to `Control` (which audits refusals).
The handlers only parse (a bad parameter is a 400 naming it) and shape JSON. docs/api.md is the
reference; `reliable.web.openapi` describes the same routes as an OpenAPI document.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from ..access import Principal
from ..control import RESOLUTIONS, CommandResult, require_reason
from ..errors import ConfigError
from ..operators import COMMAND_ORDER, SYNONYMS
from ..queue_pauses import queue_names
from ..states import JobStatus
from ..store import Reads, selection
from ..store.overview import OVERVIEW_QUEUES
from ..store.selection import AmbiguousJobId, JobFilter, filter_from_params, page_jobs, parse_time, resolve_job_id
from .auth import authenticate, state_of
from .bodies import json_object
from .inputs import DEFAULT_LIMIT, MAX_LIMIT, query_before, query_cursor, query_int, query_one, query_window
from .paths import JobRoute
from .queries import event_view, job_detail, job_view
from .queries import job_message as message_of
from .redaction import audience_for

__all__ = ["ALERT_STATES", "COMMANDS", "DEFAULT_EVENT_LIMIT", "DEFAULT_LIMIT", "FILTER_PARAMS", "MAX_LIMIT",
           "RESOLUTIONS", "job_filter", "routes"]

#: The commands of POST /api/v1/jobs/{job_id}/{command} and the Control method each calls.
COMMANDS: dict[str, str] = {**{command: command for command in COMMAND_ORDER}, **SYNONYMS}
#: How many of a job's most recent events its detail and history show by default.
DEFAULT_EVENT_LIMIT = 200
#: What `?state=` of GET /api/v1/alerts accepts.
ALERT_STATES: tuple[str, ...] = ("pending", "firing", "suppressed", "resolved")
#: The query parameters of GET /api/v1/jobs (the dead-letter and review listings take them but `state`).
FILTER_PARAMS: tuple[str, ...] = (*(p for p in selection.FILTER_PARAMS if p != "ids"), "limit", "cursor")
_BODY_FIELDS = frozenset({"reason", "dry_run", "allow_duplicate_side_effects", "resolution"})
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _bad(message: str) -> HTTPException:
    return HTTPException(400, message)


# -- parameters ----------------------------------------------------------------------------------


def _check_known(request: Request, known: Iterable[str]) -> None:
    allowed = set(known)
    for name in request.query_params:
        if name not in allowed:
            raise _bad(f"unknown parameter {name!r} (known: {', '.join(sorted(allowed)) or 'none'})")


def _time(request: Request, name: str) -> float | None:
    value = query_one(request, name)
    if value is None or value == "":
        return None
    try:
        return parse_time(value, name)
    except ConfigError as exc:
        raise _bad(f"parameter {exc}") from None


def _bool(request: Request, name: str) -> bool:
    value = query_one(request, name)
    if value is None or value.lower() in _FALSE:
        return False
    if value.lower() in _TRUE:
        return True
    raise _bad(f"parameter {name!r} must be true or false, not {value!r}")


def _text(request: Request, name: str) -> str | None:
    value = query_one(request, name)
    return value or None


def job_filter(request: Request, *, fixed_states: tuple[JobStatus, ...] | None = None,
               exclude_discarded: bool = False) -> JobFilter:
    """The JobFilter the query parameters give (`fixed_states`: the listing's own states, no ?state=),
    by the one rule the bulk operations' filters follow too (`selection.filter_from_params`)."""
    params = {name: request.query_params.getlist(name) for name in request.query_params
              if name in FILTER_PARAMS and name not in ("limit", "cursor")}
    try:
        flt = filter_from_params(params)
    except ConfigError as exc:
        raise _bad(f"parameter {exc}") from None
    if fixed_states is not None:
        flt = dataclasses.replace(flt, statuses=fixed_states)
    return dataclasses.replace(flt, exclude_discarded=exclude_discarded)


def _field(body: dict[str, Any], name: str, kind: type, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is not None and not isinstance(value, kind):
        raise _bad(f"field {name!r} must be a {'boolean' if kind is bool else 'string'}")
    return value


def _command_kwargs(command: str, body: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(body) - _BODY_FIELDS)
    if unknown:
        raise _bad(f"unknown field {unknown[0]!r} (known: {', '.join(sorted(_BODY_FIELDS))})")
    kwargs: dict[str, Any] = {"reason": _field(body, "reason", str), "dry_run": _field(body, "dry_run", bool, False)}
    allow = _field(body, "allow_duplicate_side_effects", bool, False)
    if COMMANDS[command] in ("restart", "requeue"):
        kwargs["allow_duplicate_side_effects"] = allow
    elif allow:
        raise _bad(f"field 'allow_duplicate_side_effects' applies to restart, requeue and retry, not {command}")
    resolution = _field(body, "resolution", str)
    if COMMANDS[command] == "reconcile":  # its synonym "resolve" too
        if resolution not in RESOLUTIONS:
            raise _bad(f"field 'resolution' must be one of {', '.join(RESOLUTIONS)}, not {resolution!r}")
        kwargs["resolution"] = resolution
    elif resolution is not None:
        raise _bad(f"field 'resolution' applies to reconcile only, not {command}")
    return kwargs


# -- handlers ------------------------------------------------------------------------------------


async def _json_from_pool(func: Callable[[], dict[str, Any]]) -> Response:
    """`func`'s answer (blocking store work, run in the thread pool) as JSON; an ambiguous job id prefix
    is a 409 listing its candidates."""
    try:
        return JSONResponse(await run_in_threadpool(func))
    except AmbiguousJobId as exc:
        return JSONResponse({"error": {"status": 409, "message": str(exc), "type": type(exc).__name__,
                                       "candidates": list(exc.candidates)}}, 409)


def _page(store: Reads, flt: JobFilter, principal: Principal, patterns: tuple[str, ...], limit: int,
          cursor: str | None) -> dict[str, Any]:
    page = page_jobs(store, flt, reader=principal.reader, limit=limit, cursor=cursor)
    return {"jobs": [job_view(job, principal, patterns) for job in page.jobs], "next_cursor": page.next_cursor}


async def _listing(request: Request, principal: Principal, flt: JobFilter) -> JSONResponse:
    state = state_of(request)
    limit = query_int(request, "limit", DEFAULT_LIMIT, MAX_LIMIT)
    cursor = query_cursor(request)
    return JSONResponse(await run_in_threadpool(_page, state.store, flt, principal, state.config.redact, limit,
                                                cursor))


async def list_jobs(request: Request) -> JSONResponse:
    """GET /api/v1/jobs: jobs matching the filters, newest change first, one page."""
    principal = await authenticate(request)
    _check_known(request, FILTER_PARAMS)
    return await _listing(request, principal, job_filter(request))


async def dead_letters(request: Request) -> JSONResponse:
    """GET /api/v1/dlq: DEAD jobs (those discarded since they died only with ?include_discarded=true)."""
    principal = await authenticate(request)
    _check_known(request, (*(p for p in FILTER_PARAMS if p != "state"), "include_discarded"))
    flt = job_filter(request, fixed_states=(JobStatus.DEAD,),
                     exclude_discarded=not _bool(request, "include_discarded"))
    return await _listing(request, principal, flt)


async def review(request: Request) -> JSONResponse:
    """GET /api/v1/review: REVIEW jobs (an ambiguous side effect waits for a person)."""
    principal = await authenticate(request)
    _check_known(request, (p for p in FILTER_PARAMS if p != "state"))
    return await _listing(request, principal, job_filter(request, fixed_states=(JobStatus.REVIEW,)))


async def job(request: Request) -> Response:
    """GET /api/v1/jobs/{job_id}: the job, its contract, attempts, effects, events and available actions."""
    principal = await authenticate(request)
    _check_known(request, ("event", "since", "event_limit", "before"))
    events = request.query_params.getlist("event") or None
    since = _time(request, "since")
    event_limit = query_int(request, "event_limit", DEFAULT_EVENT_LIMIT, MAX_LIMIT)
    before = query_before(request)
    state = state_of(request)
    control = state.control_for(principal)

    def detail() -> dict[str, Any]:
        job_id = resolve_job_id(state.store, request.path_params["job_id"])
        return job_detail(control, job_id, principal, state.config.redact, events=events, since=since,
                          event_limit=event_limit, before=before)

    return await _json_from_pool(detail)


async def job_events(request: Request) -> Response:
    """GET /api/v1/jobs/{job_id}/events: the job's history (the most recent `limit`), oldest first."""
    principal = await authenticate(request)
    _check_known(request, ("event", "since", "limit", "before"))
    names = request.query_params.getlist("event") or None
    since = _time(request, "since")
    limit = query_int(request, "limit", DEFAULT_EVENT_LIMIT, MAX_LIMIT)
    before = query_before(request)
    state = state_of(request)

    def history() -> dict[str, Any]:
        job_id = resolve_job_id(state.store, request.path_params["job_id"])
        job = state.store.get(job_id)
        audience = audience_for(principal, job, state.config.redact)
        rows = [event_view(event, audience)
                for event in state.store.events(job_id, events=names, since=since, limit=limit, before=before)]
        return {"job_id": job_id, "events": rows}

    return await _json_from_pool(history)


async def job_message(request: Request) -> Response:
    """GET /api/v1/jobs/{job_id}/message: the job's whole message, masked for the caller (its detail
    leaves a message out above `queries.MAX_SHOWN_MESSAGE_BYTES`)."""
    principal = await authenticate(request)
    _check_known(request, ())
    state = state_of(request)

    def whole() -> dict[str, Any]:
        job_id = resolve_job_id(state.store, request.path_params["job_id"])
        return {"job_id": job_id, "message": message_of(state.store, job_id, principal, state.config.redact)}

    return await _json_from_pool(whole)


async def command(request: Request) -> Response:
    """POST /api/v1/jobs/{job_id}/{command}: one operator command, as the authenticated principal."""
    principal = await authenticate(request)
    name = request.path_params["command"]
    if name not in COMMANDS:
        raise HTTPException(404, f"unknown command {name!r} (known: {', '.join(COMMANDS)})")
    _check_known(request, ())
    kwargs = _command_kwargs(name, await json_object(request))
    require_reason(COMMANDS[name], kwargs["reason"])  # before the job is even looked up, as the CLI does
    state = state_of(request)
    control = state.control_for(principal)

    def run() -> dict[str, Any]:
        job_id = resolve_job_id(state.store, request.path_params["job_id"])
        result: CommandResult = getattr(control, COMMANDS[name])(job_id, **kwargs)
        return result.as_dict()

    return await _json_from_pool(run)


async def overview_figures(request: Request) -> JSONResponse:
    """GET /api/v1/overview: counts per state and queue of the OVERVIEW_QUEUES busiest queues (the
    page's rows; `queues_total`: every queue with jobs or a pause, and `queues_url`: GET /api/v1/queues
    pages through them all), dead
    letters, review, retry_wait, scheduled, per-minute series, wait/run p50/p95 over the last hour
    (`latency`), and `history`: outcomes and p95 per bucket over `window` (1h, the default, 24h or 7d)."""
    await authenticate(request)
    _check_known(request, ("window",))
    window = query_window(request)
    state = state_of(request)
    figures = await run_in_threadpool(state.overview)
    total = len(queue_names(figures, await run_in_threadpool(state.queue_pauses)))  # the paused ones too
    series = await run_in_threadpool(state.history, window)
    return JSONResponse({**figures.as_dict(queues=OVERVIEW_QUEUES, queues_total=total), "history": series.as_dict()})


async def alert_list(request: Request) -> JSONResponse:
    """GET /api/v1/alerts: a page (?limit=, ?cursor=) of the alerts, optionally of one state: the store
    evaluator's (reliable_alerts) and those Alertmanager holds (Prometheus'), each with its `source`,
    `next_cursor` and `total`; `alertmanager` says whether Alertmanager was read (`error` when it was
    not: the list then lacks Prometheus' alerts)."""
    from .console_alerts import all_alerts, page_params

    await authenticate(request)
    _check_known(request, ("state", "limit", "cursor"))
    limit, cursor = page_params(request)
    wanted = query_one(request, "state")
    if wanted is not None and wanted.lower() not in ALERT_STATES:
        raise _bad(f"parameter 'state' must be one of {', '.join(ALERT_STATES)}, not {wanted!r}")
    return JSONResponse(await run_in_threadpool(functools.partial(all_alerts, request, wanted and wanted.lower(),
                                                                  limit=limit, cursor=cursor)))


async def whoami(request: Request) -> JSONResponse:
    """GET /api/v1/whoami: the authenticated principal."""
    principal = await authenticate(request)
    return JSONResponse(principal.as_dict())


def routes() -> list[BaseRoute]:
    """The API's routes."""
    return [
        Route("/api/v1/whoami", whoami, methods=["GET"], name="api_whoami"),
        Route("/api/v1/jobs", list_jobs, methods=["GET"], name="api_list_jobs"),
        JobRoute("/api/v1/jobs/{job_id}", job, methods=["GET"], name="api_job"),
        JobRoute("/api/v1/jobs/{job_id}/events", job_events, methods=["GET"], name="api_job_events"),
        JobRoute("/api/v1/jobs/{job_id}/message", job_message, methods=["GET"], name="api_job_message"),
        JobRoute("/api/v1/jobs/{job_id}/{command}", command, methods=["POST"], name="api_command"),
        Route("/api/v1/dlq", dead_letters, methods=["GET"], name="api_dead_letters"),
        Route("/api/v1/review", review, methods=["GET"], name="api_review"),
        Route("/api/v1/overview", overview_figures, methods=["GET"], name="api_overview_figures"),
        Route("/api/v1/alerts", alert_list, methods=["GET"], name="api_alert_list"),
    ]
