"""Request bodies: one size limit for every route, one JSON decoder for every API route that takes a body.

- `BodyLimit` (ASGI middleware, outermost): a body larger than `MAX_BODY_BYTES` (by its
  Content-Length, or counted as it arrives when it has none) is refused with 413 before it is read
  whole, on the API (JSON error) and on the console's forms alike.
- `json_object(request)`: the API's body is UTF-8 JSON, an object, nested at most `MAX_JSON_DEPTH`
  levels, without NaN or Infinity; an empty body is `{}`. Every failure, a RecursionError of the
  decoder included, is the API's JSON 400 saying what is wrong (docs/api.md, "Errors").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .inputs import check_body

__all__ = ["MAX_BODY_BYTES", "MAX_JSON_DEPTH", "BodyLimit", "command_body", "json_object"]

#: The largest request body accepted, in bytes (a command's body is a few hundred).
MAX_BODY_BYTES = 256 * 1024
#: The deepest nesting of objects and arrays in an API body.
MAX_JSON_DEPTH = 32

_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
_NOT_AN_OBJECT = 'the body must be a JSON object, e.g. {"reason": "..."}'


def _too_large() -> HTTPException:
    return HTTPException(413, f"the request body is larger than {MAX_BODY_BYTES} bytes")


class BodyLimit:
    """Refuse (413) a request body larger than MAX_BODY_BYTES, before it is read whole.

    `refusal` shapes the answer to a declared Content-Length over the limit (refused before routing,
    so also on a route that reads no body); a body found too large while read raises the 413 as an
    HTTPException, which the app's handler shapes.
    """

    def __init__(self, app: ASGIApp, refusal: Callable[[Scope, HTTPException], Response],
                 max_bytes: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.refusal = refusal
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            # Refused before routing: also on a route that would not read its body.
            await self.refusal(scope, _too_large())(scope, receive, send)
            return
        received = 0

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _too_large()
            return message

        await self.app(scope, limited, send)


def _depth(value: Any) -> int:
    """How deeply `value` nests objects and arrays (iterative: the value may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


async def json_object(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when empty); HTTPException 400 (or 413) saying what is wrong."""
    if request.headers.get("content-type", "").startswith(_FORMS):
        # A form may have been read already (a cookie session's CSRF field); the API takes JSON only.
        raise HTTPException(400, _NOT_AN_OBJECT)
    raw = await request.body()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise HTTPException(400, f"the body is not UTF-8 (byte {exc.start}); {_NOT_AN_OBJECT}") from None
    if not text.strip():
        return {}
    try:
        body = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise HTTPException(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise HTTPException(400, f"the body is not JSON ({' '.join(str(exc).split())[:200]}); "
                                 f"{_NOT_AN_OBJECT}") from None
    if not isinstance(body, dict):
        raise HTTPException(400, _NOT_AN_OBJECT)
    if _depth(body) > MAX_JSON_DEPTH:
        raise HTTPException(400, f"the body nests deeper than {MAX_JSON_DEPTH} levels")
    check_body(body)  # its text fields, before any reaches the store (reliable.web.inputs)
    return body


async def command_body(request: Request, *fields: str) -> tuple[dict[str, Any], str | None]:
    """A command's body (`json_object`): `reason` (a string or absent) and `fields`, nothing else (400
    naming an unknown field); the body and its reason."""
    body = await json_object(request)
    known = ("reason", *fields)
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise HTTPException(400, f"unknown field {unknown[0]!r} (known: {', '.join(sorted(known))})")
    reason = body.get("reason")
    if reason is not None and not isinstance(reason, str):
        raise HTTPException(400, "field 'reason' must be a string")
    return body, reason
