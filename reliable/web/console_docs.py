"""The console's documentation pages: the pages `reliable docs` prints, rendered as HTML.

    GET /docs                   the topics
    GET /docs/{topic}           one page (reliable.web.doc_html), its links to other pages as links
                                to their console pages, its anchors as GitHub writes them
    GET /docs/images/{name}     a picture the pages show (docs/images, shipped in the wheel)
"""

from __future__ import annotations

import re

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from ..defaults import path, topics
from ..errors import ConfigError
from .auth import authenticate
from .console import error_page, render
from .doc_html import doc_html

__all__ = ["routes"]

_IMAGE = re.compile(r"[\w.-]+\.(png|svg|jpg)")
_PAGE = re.compile(r"(?:\./)?([\w-]+)\.md(#[\w-]*)?")


def page_link(request: Request, target: str) -> str | None:
    """The console's URL for a link target of a page: another page (`worker.md#metrics`), a picture
    beside the pages (`images/x.png`), an anchor of the page, an absolute URL; None for anything
    else (a file the console does not serve: the link's text is shown without a link)."""
    if re.match(r"https?://|#", target):
        return target
    page = _PAGE.fullmatch(target)
    if page is not None:
        return str(request.url_for("doc", topic=page.group(1).lower())) + (page.group(2) or "")
    if target.startswith("images/") and _IMAGE.fullmatch(target.removeprefix("images/")):
        return str(request.url_for("doc_image", name=target.removeprefix("images/")))
    return None


async def docs_page(request: Request) -> Response:
    """GET /docs: the documentation's topics (the pages `reliable docs` prints)."""
    principal = await authenticate(request)
    return render(request, "docs.html", principal=principal, topics=topics.topics(), page=None)


async def doc_page(request: Request) -> Response:
    """GET /docs/{topic}: one page, rendered as HTML."""
    principal = await authenticate(request)
    try:
        page = topics.find(request.path_params["topic"])
    except ConfigError:
        return error_page(request, 404, f"no documentation topic {request.path_params['topic']!r}")
    body = doc_html(page.text(), lambda target: page_link(request, target))
    return render(request, "docs.html", principal=principal, topics=topics.topics(), page=page, body=body)


async def doc_image(request: Request) -> Response:
    """GET /docs/images/{name}: a picture of the pages (a plain file name under docs/images only)."""
    await authenticate(request)
    name = request.path_params["name"]
    file = path("docs") / "images" / name
    if not _IMAGE.fullmatch(name) or not file.is_file():
        return error_page(request, 404, f"no documentation image {name!r}")
    return FileResponse(file)


def routes() -> list[BaseRoute]:
    """The documentation's routes."""
    return [
        Route("/docs", docs_page, name="docs"),
        Route("/docs/images/{name}", doc_image, name="doc_image"),
        Route("/docs/{topic}", doc_page, name="doc"),
    ]
