"""The console's pages: server-rendered HTML (Jinja2) over the same handlers' data as the API."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .auth import CSRF_FIELD, authenticate, check_csrf, csrf_token, sign_in, sign_out

__all__ = ["error_page", "render", "routes", "sign_in_redirect"]

_HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(_HERE / "templates"))


def render(request: Request, template: str, http_status: int = 200, **context: Any) -> HTMLResponse:
    """A page: `template` with the session's CSRF token and `context`."""
    context.setdefault("principal", None)
    return templates.TemplateResponse(request, template, {"csrf": csrf_token(request), "csrf_field": CSRF_FIELD,
                                                          **context}, status_code=http_status)


def error_page(request: Request, status: int, message: str) -> Response:
    """An error as a page."""
    return render(request, "error.html", status, status=status, message=message)


def sign_in_redirect(request: Request) -> Response:
    """To the sign-in page, coming back to where the user was."""
    return RedirectResponse(f"{request.url_for('sign_in')}?next={quote(request.url.path)}", 303)


async def sign_in_page(request: Request) -> Response:
    """GET/POST /login: sign in with an API token."""
    error = None
    if request.method == "POST":
        await check_csrf(request)  # login CSRF: nobody may sign a user in to their own account
        form = await request.form()
        token = str(form.get("token") or "")
        principal = await sign_in(request, token)
        if principal is not None:
            target = str(request.query_params.get("next") or request.url_for("overview"))
            if not target.startswith("/") or target.startswith("//"):
                target = str(request.url_for("overview"))
            return RedirectResponse(target, 303)
        error = "That token is unknown, revoked or expired."
    return render(request, "login.html", 401 if error else 200, error=error)


async def sign_out_page(request: Request) -> Response:
    """POST /logout."""
    await authenticate(request)  # checks the CSRF token: nobody else may sign a user out
    sign_out(request)
    return RedirectResponse(str(request.url_for("sign_in")), 303)


async def overview(request: Request) -> Response:
    """GET /: the overview."""
    principal = await authenticate(request)
    return render(request, "overview.html", principal=principal)


def routes() -> list[BaseRoute]:
    """The console's routes."""
    return [
        Route("/", overview, name="overview"),
        Route("/login", sign_in_page, methods=["GET", "POST"], name="sign_in"),
        Route("/logout", sign_out_page, methods=["POST"], name="sign_out"),
        Mount("/static", app=StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]


