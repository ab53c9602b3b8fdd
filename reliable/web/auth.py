"""Authenticating a request to the API or console, and CSRF protection for browser sessions.

Three ways in, tried in this order:
1. `Authorization: Bearer rel_...`: an API token (scripts, the CLI's `--api`). No cookie is involved,
   so no CSRF check is needed.
2. A browser session: the console's sign-in form takes a token and keeps its id in a signed cookie;
   the token is looked up again on every request, so a revocation takes effect at once.
3. An authenticating proxy's header (`WebConfig.proxy_header`), trusted only from the addresses in
   `trusted_proxies` (which must be given: no default), and only when the proxy set it once. The
   address is the ASGI client's: a server that rewrites it from X-Forwarded-For (uvicorn's
   --proxy-headers) must not be used in front of it, or must trust only the proxy's own address.

Unsafe methods (POST, PUT, PATCH, DELETE) authenticated by a cookie or a proxy header must carry
the session's CSRF token (header `X-CSRF-Token` or form field `csrf_token`).
"""

from __future__ import annotations

import hmac
import secrets
from typing import TYPE_CHECKING

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..access import ApiToken, ApiTokens, Principal
from ..errors import ConfigError, StoreError
from ..inputs import text_problem
from .inputs import check_request

if TYPE_CHECKING:
    from .state import WebState

__all__ = ["CSRF_FIELD", "CSRF_HEADER", "authenticate", "csrf_token", "sign_in", "sign_out"]

CSRF_HEADER = "X-CSRF-Token"
CSRF_FIELD = "csrf_token"
_UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def state_of(request: Request) -> WebState:
    """The app's WebState."""
    state: WebState = request.app.state.reliable
    return state


def csrf_token(request: Request) -> str:
    """The session's CSRF token (created on first use)."""
    token = request.session.get("csrf")
    if not token:
        token = secrets.token_urlsafe(24)
        request.session["csrf"] = token
    return str(token)


async def check_csrf(request: Request) -> None:
    """Raise 403 unless an unsafe request carries the session's CSRF token."""
    if request.method not in _UNSAFE:
        return
    expected = request.session.get("csrf")
    presented = request.headers.get(CSRF_HEADER)
    if presented is None and request.headers.get("content-type", "").startswith(
            ("application/x-www-form-urlencoded", "multipart/form-data")):
        form = await request.form()
        value = form.get(CSRF_FIELD)
        presented = value if isinstance(value, str) else None
    if not expected or not presented or not hmac.compare_digest(str(expected), presented):
        raise HTTPException(403, "missing or wrong CSRF token (send the X-CSRF-Token header of your session)")


async def authenticate(request: Request) -> Principal:
    """The request's principal; HTTPException 401 when it is not authenticated, 403 on a CSRF failure,
    400 first when a query or path parameter or a form field holds a control character
    (`reliable.web.inputs.check_request`: nothing of the request reaches the store before)."""
    await check_request(request)
    state = state_of(request)
    header = request.headers.get("authorization", "")
    if header:
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise HTTPException(401, "Authorization must be 'Bearer <API token>'")
        token = await run_in_threadpool(state.tokens.authenticate, value)
        if token is None:
            raise HTTPException(401, "unknown, revoked or expired API token")
        return token.principal("token")
    token_id = request.session.get("token_id")
    if token_id:
        token = await run_in_threadpool(_session_token, state.tokens, request)
        if token is not None:
            await check_csrf(request)
            return token.principal("session")
    config = state.config
    if config.proxy_header:
        names = request.headers.getlist(config.proxy_header)
        client = request.client.host if request.client else ""
        if names and client in config.trusted_proxies:
            if len(names) > 1:  # a proxy that appends instead of replacing: the client wrote one of them
                raise HTTPException(401, f"{config.proxy_header} given {len(names)} times; the proxy must set it once")
            name = names[0].strip()
            if name:
                await check_csrf(request)
                policy = config.proxy_operators
                if policy is None or not policy.roles_of(name):
                    raise HTTPException(403, f"{name!r} has no role in the operators policy")
                return Principal(name, ",".join(policy.roles_of(name)), "proxy", policy)
    raise HTTPException(401, "sign in: an API token (Authorization: Bearer rel_...) or a console session")


def _session_token(tokens: ApiTokens, request: Request) -> ApiToken | None:
    try:
        token = tokens.get(str(request.session["token_id"]))
    except StoreError:  # also a ConfigError when misconfigured: not a reason to end the session
        raise
    except ConfigError:
        token = None
    if token is None or not token.active(tokens.store.now()):
        request.session.clear()
        return None
    return token


async def sign_in(request: Request, presented: str) -> Principal | None:
    """Start a browser session with an API token; None when the token is not valid."""
    if text_problem(presented) is not None:
        return None  # no token holds one: never looked up
    token = await run_in_threadpool(state_of(request).tokens.authenticate, presented)
    if token is None:
        return None
    request.session.clear()
    request.session["token_id"] = token.token_id
    csrf_token(request)
    return token.principal("session")


def sign_out(request: Request) -> None:
    """End the browser session."""
    request.session.clear()
