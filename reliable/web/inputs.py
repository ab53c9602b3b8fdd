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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..inputs import text_problem

__all__ = ["AUDITED_FIELDS", "check_body", "check_request"]

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
