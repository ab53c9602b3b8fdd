"""Job ids in URLs: every route that takes one, every link that names one, any id the rule allows.

A job id may hold `/ ? # %` and spaces (reliable.inputs). A link therefore carries it
percent-encoded as ONE path segment (`/jobs/invoice%2F2026%2F42`), and `JobRoute` matches the
request's raw path (ASGI ``raw_path``), where an encoded ``/`` is still not a separator, then
decodes the id. Starlette's own routing matches the decoded path, where ``invoice/2026/42`` would be
three segments: a 404 or 405, and `url_for` would refuse to build the link (a 500 on every page
listing such a job). With `JobRoute`, `request.url_for("job", job_id=...)` encodes the id itself.

Schedule names get the same treatment (`SegmentRoute` with `param="name"`): a name may hold ``/``.

A server that gives no raw path (a WSGI bridge) is matched on the decoded path: ids with a ``/``
are then not reachable there (404), every other id is.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote

from starlette.convertors import Convertor
from starlette.routing import Match, Route
from starlette.types import Scope

__all__ = ["JOB_ID_PARAM", "JobIdConvertor", "JobRoute", "SegmentRoute", "raw_route_path"]

#: The path parameter every job route names its job id with.
JOB_ID_PARAM = "job_id"


class JobIdConvertor(Convertor[str]):
    """One raw path segment <-> a job id (or a schedule name): decoded when matched, percent-encoded
    (``/`` too) in links."""

    regex = "[^/]+"

    def convert(self, value: str) -> str:
        """The job id a raw segment carries."""
        return unquote(value)

    def to_string(self, value: str) -> str:
        """The segment that carries the job id `value`."""
        text = str(value)
        if not text:
            raise ValueError("a path segment (job id, schedule name) must not be empty")
        if text in (".", ".."):  # a client would resolve them as dot segments, never send them
            return text.replace(".", "%2E")
        return quote(text, safe="")


def raw_route_path(scope: Scope) -> str:
    """The request's path below the app's root path, as the client encoded it (a percent-encoded
    ``/`` stays encoded); the decoded path re-encoded when the server gives no raw path."""
    path: str = scope["path"]
    raw_bytes = scope.get("raw_path")
    raw = raw_bytes.decode("utf-8", "surrogateescape") if raw_bytes else quote(path, safe="/")
    root = scope.get("root_path", "")
    if not root or not path.startswith(root):
        return raw
    # Skip the raw segments that spell the root path (a mount's prefix), whatever their encoding.
    segments = raw.split("/")
    spelled = ""
    for index, segment in enumerate(segments[1:], start=1):
        spelled += "/" + unquote(segment)
        if spelled == root:
            return "/" + "/".join(segments[index + 1:]) if index + 1 < len(segments) else ""
        if len(spelled) > len(root):
            break
    return raw


class SegmentRoute(Route):
    """A route whose `{param}` is one raw path segment holding any text (see the module doc)."""

    def __init__(self, path: str, endpoint: Any, *, param: str, **kwargs: Any) -> None:
        if "{" + param + "}" not in path:
            raise ValueError(f"the route's path names no {{{param}}}: {path!r}")
        super().__init__(path, endpoint, **kwargs)
        self.param_convertors[param] = JobIdConvertor()

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        """Match the raw path (an encoded ``/`` inside the job id is no separator)."""
        if scope["type"] != "http":
            return super().matches(scope)
        return super().matches({**scope, "path": raw_route_path(scope), "root_path": ""})


class JobRoute(SegmentRoute):
    """A route whose `{job_id}` is one raw path segment holding any job id (see the module doc)."""

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        super().__init__(path, endpoint, param=JOB_ID_PARAM, **kwargs)
