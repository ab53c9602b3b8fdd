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

from markupsafe import Markup, escape

__all__ = ["runbook_html"]

_HEADING = re.compile(r"^(#{1,6})\s+(.*)$")
_ITEM = re.compile(r"^( *)[-*]\s+(.*)$")
_INLINE = re.compile(r"`([^`]+)`|(https?://[^\s<>`\"]+[^\s<>`\".,;:)\]])")


def _inline(text: str) -> str:
    """`text` (unescaped) as escaped HTML with its code spans and bare links as tags."""
    out: list[str] = []
    last = 0
    for match in _INLINE.finditer(text):
        out.append(str(escape(text[last:match.start()])))
        code, url = match.groups()
        if code is not None:
            out.append(f"<code>{escape(code)}</code>")
        else:
            out.append(f'<a href="{escape(url)}" rel="noreferrer">{escape(url)}</a>')
        last = match.end()
    out.append(str(escape(text[last:])))
    return "".join(out)


def runbook_html(markdown: str) -> Markup:
    """The runbook's Markdown (as `RunbookRenderer.runbook` returns it) as safe HTML."""
    lines = html.unescape(markdown).splitlines()
    out: list[str] = []
    paragraph: list[str] = []
    depth = 0  # open <ul> levels
    item_open: list[bool] = []

    def close_paragraph() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph))}</p>")
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
            out.append(f"<h{level + 1}>{_inline(heading.group(2))}</h{level + 1}>")
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
            out.append(f"<li>{_inline(item.group(2))}")
            item_open[-1] = True
        elif depth and line.startswith(" "):
            out.append(" " + _inline(line.strip()))  # a list item's continuation
        else:
            close_lists()
            paragraph.append(line.strip())
    close_paragraph()
    close_lists()
    return Markup("\n".join(out))
