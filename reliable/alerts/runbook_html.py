"""A rendered runbook (Markdown) as HTML for the console, every character of it escaped. Pure.

The runbooks use a small part of Markdown: `#` headings, paragraphs, `-` lists (nested by two
spaces), `inline code` and bare http(s) links. That part is turned into tags; everything else is
text. The runbook renderer escapes its values for HTML (`RunbookRenderer`'s autoescape), so the
text is unescaped once here and every piece escaped again: no tag can come from a job's data, and
`&#39;` shows as a quote, not as an entity. No Markdown library is a dependency of reliable.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable

from markupsafe import Markup, escape

__all__ = ["JobUrl", "runbook_html", "runbook_page"]

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_ITEM = re.compile(r"^( *)[-*]\s+(.*)$")
_INLINE = re.compile(r"`([^`]+)`|(https?://[^\s<>`\"]+[^\s<>`\".,;:)\]])")


JobUrl = Callable[[str], str]


def _inline(text: str, job_url: JobUrl | None = None) -> str:
    """`text` (unescaped) as escaped HTML with its code spans and bare links as tags; a code span
    right after "Job " (a job id in `_jobs.md.j2`) links to `job_url(id)` when given."""
    out: list[str] = []
    last = 0
    for match in _INLINE.finditer(text):
        out.append(str(escape(text[last:match.start()])))
        code, url = match.groups()
        if code is not None and job_url is not None and text[:match.start()].endswith("Job "):
            out.append(f'<a href="{escape(job_url(code))}"><code>{escape(code)}</code></a>')
        elif code is not None:
            out.append(f"<code>{escape(code)}</code>")
        else:
            out.append(f'<a href="{escape(url)}" rel="noreferrer">{escape(url)}</a>')
        last = match.end()
    out.append(str(escape(text[last:])))
    return "".join(out)


def runbook_html(markdown: str, *, job_url: JobUrl | None = None) -> Markup:
    """The runbook's Markdown (as `RunbookRenderer.runbook` returns it) as safe HTML; each listed
    job's id a link to `job_url(id)` when given (the console's job page)."""
    lines = html.unescape(markdown).splitlines()
    out: list[str] = []
    paragraph: list[str] = []
    depth = 0  # open <ul> levels
    item_open: list[bool] = []

    def close_paragraph() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph), job_url)}</p>")
            paragraph.clear()

    def close_lists(to: int = 0) -> None:
        nonlocal depth
        while depth > to:
            if item_open.pop():
                out[-1] += "</li>"
            out.append("</ul>")
            depth -= 1
        if depth and item_open[-1]:
            out[-1] += "</li>"
            item_open[-1] = False

    for line in lines:
        heading, item = _HEADING.match(line), _ITEM.match(line)
        if not line.strip():
            close_paragraph()
            continue
        if heading:
            close_paragraph()
            close_lists()
            level = len(heading.group(1))
            out.append(f"<h{level + 1}>{_inline(heading.group(2), job_url)}</h{level + 1}>")
        elif item:
            close_paragraph()
            level = len(item.group(1)) // 2 + 1
            if level > depth:
                while depth < level:
                    out.append("<ul>")
                    item_open.append(False)
                    depth += 1
            else:
                close_lists(level)
            out.append(f"<li>{_inline(item.group(2), job_url)}")
            item_open[-1] = True
        elif depth and line.startswith(" "):
            out.append(" " + _inline(line.strip(), job_url))  # a list item's continuation
        else:
            close_lists()
            paragraph.append(line.strip())
    close_paragraph()
    close_lists()
    return Markup("\n".join(out))


def runbook_page(name: str, markdown: str, *, job_url: JobUrl | None = None) -> str:
    """A whole HTML document of one runbook (the exporter's page, where no console layout exists)."""
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Runbook {escape(name)}</title>"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;"
            "line-height:1.45}code{background:#f3f3f3;padding:0 .2em;overflow-wrap:anywhere}</style></head>\n"
            f"<body><article class=\"runbook\">\n{runbook_html(markdown, job_url=job_url)}\n</article></body></html>\n")
