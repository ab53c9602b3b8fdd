"""Every text input of the API and the console, checked before it reaches the store (reliable.inputs).

A control character (NUL above all: PostgreSQL's text cannot hold it) in a query parameter (name or
value), a path parameter (a job id, an operation id), a form field or a JSON body's field is a 400
naming it. `authenticate` checks the query, the path and a form before anything else; the one JSON
decoder (`bodies.json_object`) checks the body it decoded.

One field is left to the command layer: `reason`. `Control` refuses a reason with control
characters itself (`check_reason_text`) and audits the refusal as `command_refused`, the reason
escaped, so that a refused command is recorded whatever its reason holds (the workflow and schedule
commands, `reliable.web.flows`, do the same on their audit trails); bulk operations refuse
it before the operation is stored.

The query parameters that page or window a listing are parsed here too, one function each, for the
API and the console alike (`QUERY_PARSERS` names them): a bad value is the same 400 naming the
parameter on both (the API answers it as JSON, the console with its error page), never ignored on
one and refused on the other. tests/web/test_query_params.py enumerates every GET route of the app
with the parameters of QUERY_PARSERS it reads, so a new page or route cannot skip the rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..inputs import shorten, text_problem
from ..store.job_stats import WINDOWS

__all__ = ["AUDITED_FIELDS", "DEFAULT_LIMIT", "MAX_EVENT_ID", "MAX_LIMIT", "QUERY_PARSERS", "check_body",
           "check_request", "query_before", "query_cursor", "query_int", "query_one", "query_window"]

#: A page of jobs (`?limit=` of the job listings, API and console): by default, and at most.
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
#: The largest event id `?before=` accepts (a BIGINT).
MAX_EVENT_ID = 2**63 - 1

#: Fields the command layer checks itself, auditing the refusal (see the module doc).
AUDITED_FIELDS = frozenset({"reason"})
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")
_MAX_DEPTH = 64


def _check(where: str, value: str) -> None:
    problem = text_problem(value)
    if problem is not None:
        raise HTTPException(400, f"{where}: {problem}")


async def check_request(request: Request) -> None:
    """400 naming the first query parameter, path parameter or form field with a control character."""
    for name, value in request.query_params.multi_items():
        _check("parameter name", name)
        _check(f"parameter {name!r}", value)
    for name, value in request.path_params.items():
        if isinstance(value, str):
            _check(f"path parameter {name!r}", value)
    if request.method != "GET" and request.headers.get("content-type", "").startswith(_FORMS):
        form = await request.form()  # Starlette keeps it: the handler reads the same form
        for name, field in form.multi_items():
            _check("form field name", name)
            if isinstance(field, str) and name not in AUDITED_FIELDS:
                _check(f"form field {name!r}", field)


def check_body(body: Mapping[str, Any]) -> None:
    """400 naming the first field of a decoded JSON body (at any depth) whose name or text holds a
    control character; a top-level field of AUDITED_FIELDS is left to the command layer."""
    _walk(body, "", 0, top=True)


def _walk(value: Any, path: str, depth: int, *, top: bool = False) -> None:
    if depth > _MAX_DEPTH:
        raise HTTPException(400, f"field {path!r}: nested more than {_MAX_DEPTH} levels")
    if isinstance(value, str):
        _check(f"field {path!r}", value)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            name = f"{path}.{key}" if path else str(key)
            _check("field name", str(key))
            if not (top and key in AUDITED_FIELDS):
                _walk(item, name, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk(item, f"{path}[{index}]", depth + 1)


def query_one(request: Request, name: str) -> str | None:
    """The query parameter `name` (None when absent); a 400 naming it when it is given more than once."""
    values = request.query_params.getlist(name)
    if len(values) > 1:
        raise HTTPException(400, f"parameter {name!r} is given {len(values)} times; give it once")
    return values[0] if values else None


def query_int(request: Request, name: str, default: int, high: int, *, low: int = 1) -> int:
    """`?name=` as an integer from `low` to `high` (`default` when absent); a 400 naming it otherwise."""
    value = query_one(request, name)
    if value is None:
        return default
    # the length first: int() refuses more than 4,300 digits with an error that is no 400
    if not (value.isascii() and value.isdigit() and len(value) <= len(str(high)) and low <= int(value) <= high):
        raise HTTPException(400, f"parameter {name!r} must be an integer from {low} to {high}, "
                                 f"not {shorten(value, 40)!r}")
    return int(value)


def query_before(request: Request) -> int | None:
    """`?before=`: an event id (the `older_events` of a job's previous history page), or None when absent."""
    return None if query_one(request, "before") is None else query_int(request, "before", 0, MAX_EVENT_ID)


def query_window(request: Request) -> str:
    """`?window=`: a window of the history charts (job_stats.WINDOWS: 1h when absent)."""
    window = query_one(request, "window") or "1h"
    if window not in WINDOWS:
        raise HTTPException(400, f"parameter 'window' must be one of {', '.join(WINDOWS)}, not {window!r}")
    return window


def query_cursor(request: Request) -> str | None:
    """`?cursor=`: the `next_cursor` of a listing's previous page (None when absent or empty); what
    it holds is the listing's to check (a 400 naming 'cursor' when it cannot be one of its own)."""
    return query_one(request, "cursor") or None


#: The shared query parameters and the one function that parses each (see the module doc); `limit`
#: and `exited` take each route's own bounds.
QUERY_PARSERS: Mapping[str, Callable[..., Any]] = {
    "before": query_before, "window": query_window, "cursor": query_cursor, "limit": query_int,
    "event_limit": query_int, "exited": query_int}
