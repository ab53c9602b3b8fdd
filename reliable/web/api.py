"""The JSON API under /api/v1: thin handlers over `Control`, the store and `reliable.selection`.

Every handler authenticates first (`auth.authenticate`), runs the store's blocking calls in the
thread pool, and leaves every rule of what a command may do to `Control` (which audits refusals).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from .auth import authenticate

__all__ = ["routes"]


async def whoami(request: Request) -> JSONResponse:
    """GET /api/v1/whoami: the authenticated principal."""
    principal = await authenticate(request)
    return JSONResponse(principal.as_dict())


def routes() -> list[BaseRoute]:
    """The API's routes."""
    return [Route("/api/v1/whoami", whoami, methods=["GET"])]
