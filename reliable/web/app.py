"""The ASGI application: the JSON API under /api/v1 and the console's pages, over `Control` and the store.

`create_app(store, ...)` returns a Starlette app. Serve it with `reliable web`, mount it in an ASGI
project (`Mount("/reliable", app=create_app(...))` in Starlette or FastAPI), or in a WSGI one
(Django, Flask) with `reliable.web.wsgi_app(...)`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import dramatiq
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.types import ASGIApp, Scope

from ..access import ApiTokens
from ..control import ContractSource
from ..errors import (
    ConfigError,
    JobNotFound,
    NotAuthorized,
    ProcessNotFound,
    ReasonRequired,
    ReliableError,
    StoreError,
    client_message,
)
from ..limits.operator import LimitNotFound
from ..store import StateStore
from .bodies import BodyLimit
from .config import WebConfig
from .headers import SecurityHeaders
from .state import WebState

__all__ = ["create_app", "wsgi_app"]

logger = logging.getLogger("reliable.web")


def _is_api(scope: Scope) -> bool:
    return str(scope.get("path", "")).startswith(f"{scope.get('root_path', '')}/api/")


def _api_error(exc: HTTPException) -> JSONResponse:
    kind = HTTPStatus(exc.status_code).phrase.title().replace(" ", "").replace("-", "")
    return JSONResponse({"error": {"status": exc.status_code, "message": exc.detail, "type": kind}},
                        exc.status_code, headers=exc.headers)


def _refusal(scope: Scope, exc: HTTPException) -> Response:
    """The answer to a request refused before routing (BodyLimit): no page, the console has no route yet."""
    return _api_error(exc) if _is_api(scope) else PlainTextResponse(exc.detail, exc.status_code)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if _is_api(request.scope) or exc.status_code != 401:
        if _is_api(request.scope):
            return _api_error(exc)
        from .console import error_page

        return error_page(request, exc.status_code, str(exc.detail))
    from .console import sign_in_redirect

    return sign_in_redirect(request)


def _public_message(exc: Exception) -> str:
    """What a client is told of `exc` (`reliable.errors.client_message`); a store error's own text,
    which names the database, goes to the server's log."""
    if isinstance(exc, StoreError):
        logger.error("store error answering a request: %s", exc)
    return client_message(exc)


async def _reliable_error(request: Request, exc: Exception) -> Response:
    # A store error first: a misconfigured store (StoreMisconfigured is also a ConfigError) is the
    # server's fault, not the request's.
    status = (404 if isinstance(exc, JobNotFound | ProcessNotFound | LimitNotFound)
              else 403 if isinstance(exc, NotAuthorized)
              else 503 if isinstance(exc, StoreError) else 400 if isinstance(exc, ConfigError | ReasonRequired)
              else 409)
    message = _public_message(exc)
    if _is_api(request.scope):
        return JSONResponse({"error": {"status": status, "message": message, "type": type(exc).__name__}}, status)
    from .console import error_page

    return error_page(request, status, message)


class _Framed(Starlette):
    """A Starlette app whose every answer carries SECURITY_HEADERS: SecurityHeaders wraps the whole
    stack, Starlette's own ServerErrorMiddleware too, which sends a 500 past every user middleware."""

    def build_middleware_stack(self) -> ASGIApp:
        """Starlette's stack, inside SecurityHeaders."""
        return SecurityHeaders(super().build_middleware_stack())


def create_app(store: StateStore | str, *, policy: ContractSource | None = None,
               broker: dramatiq.Broker | None = None, config: WebConfig | None = None,
               actor_options: Mapping[str, Mapping[str, Any]] | None = None) -> Starlette:
    """The API and console over `store` (a StateStore or its URL).

    policy: the actors' policy (`reliable.policy.Policy`), so commands know each job's contract;
    broker: publishes resumed/restarted jobs at once (otherwise the workers' sweeper does).
    """
    from . import (
        api,
        console,
        console_alerts,  # c28-workers
        console_bulk,
        console_docs,
        fleet,  # c28-workers
        openapi,
        operations,
    )
    from .console_queues import routes as queue_pages  # issue 28: queues (c28-queues)
    from .flows_api import routes as flow_api_routes  # c28-flows: workflows and schedules
    from .flows_console import routes as flow_page_routes  # c28-flows
    from .limits import routes as limit_routes  # issue 42: operators' concurrency limits
    from .queues import routes as queue_routes  # issue 28: queues (c28-queues)

    state_store = store if isinstance(store, StateStore) else StateStore(store)
    cfg = config or WebConfig()
    app = _Framed(
        routes=[*api.routes(), *openapi.routes(), *operations.routes(), *console.routes(), *console_bulk.routes(),
                *console_docs.routes(),
                *flow_api_routes(), *flow_page_routes(),  # c28-flows
                *fleet.routes(), *console_alerts.routes(),  # c28-workers
                *queue_routes(), *queue_pages(),  # c28-queues
                *limit_routes()],  # issue 42
        middleware=[Middleware(BodyLimit, refusal=_refusal),
                    Middleware(SessionMiddleware, secret_key=cfg.secret_key, session_cookie="reliable_session",
                               same_site="strict", https_only=cfg.cookie_secure,
                               max_age=cfg.session_max_age)],
        exception_handlers={HTTPException: _http_error, ReliableError: _reliable_error},
    )
    app.state.reliable = WebState(state_store, ApiTokens(state_store), cfg, policy=policy, broker=broker,
                                  actor_options=actor_options)
    return app


def wsgi_app(store: StateStore | str, **kwargs: Any) -> Any:
    """`create_app` for a WSGI server or framework (Django, Flask): mount it under a path prefix."""
    from a2wsgi import ASGIMiddleware

    return ASGIMiddleware(create_app(store, **kwargs))  # type: ignore[arg-type]
