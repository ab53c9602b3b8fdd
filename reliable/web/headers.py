"""The headers every response of the API and console carries: no framing, no content sniffing, and a
Content-Security-Policy that lets a page load only the console's own script and stylesheet.

The console has no inline script, style or event handler (its behaviour is `static/console.js`, its
look `static/console.css`), so the policy needs no 'unsafe-inline' and no nonce; a template that
adds one breaks in the browser tests (tests/web/browser), which fail on any CSP violation.
`frame-ancestors 'none'` and `X-Frame-Options: DENY` (for browsers without CSP level 2) keep the
console out of another site's frame (clickjacking its buttons); `nosniff` keeps a JSON answer or a
downloaded message from being read as HTML or script.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "SecurityHeaders"]

#: What a console page may load: its own files only; it may be framed by nobody.
CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")

#: The headers set on every response (any value the handler set is replaced).
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}


class SecurityHeaders:
    """ASGI middleware: SECURITY_HEADERS on every HTTP response, refusals and errors included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
