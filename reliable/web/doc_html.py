"""A documentation page (Markdown) as HTML for the console's /docs, every character escaped. Pure.

The pages use a small part of Markdown, and that part is turned into tags: `#` headings (each with
the id GitHub gives it, so `page.md#section` links land), paragraphs, `-`/`*` and `1.` lists (nested
by indentation), fenced code blocks, `|` tables, `inline code`, `**bold**`, `*emphasis*`, links
`[text](target)` and images `![alt](images/x.png)`. Everything else is text, escaped: no tag can
come from a page. A link to another page (`worker.md#metrics`) becomes the console's page for that
topic (`link_of`); a link to a file beside the pages (`images/x.png`) the console's copy of it; a
link outside the shipped docs is kept as written, and an absolute URL opens in the browser as is.
No Markdown library is a dependency of reliable (reliable/alerts/runbook_html.py renders the
runbooks' smaller part of Markdown the same way).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from markupsafe import Markup, escape

__all__ = ["doc_html", "slug"]

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_ITEM = re.compile(r"^( *)([-*]|\d+[.)])\s+(.*)$")
_FENCE = re.compile(r"^( *)(```+|~~~+)\s*([\w+-]*)")
_TABLE_RULE = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$")
_INLINE = re.compile(
    r"(?P<code>`+)(?P<code_text>.+?)(?P=code)"
    r"|!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)\)"
    r"|\[(?P<text>(?:[^\[\]]|\[[^\]]*\])+)\]\((?P<href>[^)\s]+)\)"
    r"|\*\*(?P<bold>[^*]+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s][^*]*?)\*(?![\w*])"
    r"|(?P<url>https?://[^\s<>`\"]+[^\s<>`\".,;:)\]])"
)

#: A link target -> the URL the page links to (the console maps pages and images to its routes), or
#: None for a target the console does not serve: the link's text is then shown without a link.
Linker = Callable[[str], "str | None"]


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _inline(text: str, link: Linker) -> str:
    out: list[str] = []
    last = 0
    for m in _INLINE.finditer(text):
        out.append(str(escape(text[last:m.start()])))
        last = m.end()
        if m.group("code") is not None:
            out.append(f"<code>{escape(m.group('code_text').strip())}</code>")
        elif m.group("src") is not None:
            src = link(m.group("src"))
            alt = escape(m.group("alt"))
            out.append(alt if src is None else f'<img src="{escape(src)}" alt="{alt}">')
        elif m.group("href") is not None:
            href, label = link(m.group("href")), _inline(m.group("text"), link)
            outside = ' rel="noreferrer"' if re.match(r"https?://", m.group("href")) else ""
            out.append(label if href is None else f'<a href="{escape(href)}"{outside}>{label}</a>')
        elif m.group("bold") is not None:
            out.append(f"<strong>{_inline(m.group('bold'), link)}</strong>")
        elif m.group("em") is not None:
            out.append(f"<em>{_inline(m.group('em'), link)}</em>")
        else:
            url = m.group("url")
            out.append(f'<a href="{escape(url)}" rel="noreferrer">{escape(url)}</a>')
    out.append(str(escape(text[last:])))
    return "".join(out)


def _cells(line: str) -> list[str]:
    body = line.strip().removeprefix("|").removesuffix("|")
    # A `|` inside code spans is part of the cell (the docs write `a \| b` or `a|b` in code).
    cells, current, in_code = [], "", False
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and body[i + 1:i + 2] == "|":
            current += "|"
            i += 2
            continue
        if ch == "`":
            in_code = not in_code
        if ch == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += ch
        i += 1
    cells.append(current.strip())
    return cells


def doc_html(markdown: str, link: Linker = lambda target: target) -> Markup:
    """The page's Markdown as safe HTML; `link` maps each link or image target to its URL."""
    lines = markdown.splitlines()
    out: list[str] = []
    paragraph: list[str] = []
    lists: list[tuple[int, str]] = []  # open lists: (indent, "ul" or "ol")
    i = 0

    def close_paragraph() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph), link)}</p>")
            paragraph.clear()

    def close_lists(indent: int = -1) -> None:
        while lists and lists[-1][0] > indent:
            out.append(f"</li></{lists.pop()[1]}>")

    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            close_paragraph()
            if not lists or len(fence.group(1)) <= lists[-1][0]:
                close_lists()
            marker, body = fence.group(2), []
            i += 1
            while i < len(lines) and not re.fullmatch(re.escape(marker[0]) + f"{{{len(marker)},}}", lines[i].strip()):
                body.append(lines[i][len(fence.group(1)):] if lines[i].startswith(fence.group(1)) else lines[i])
                i += 1
            language = f' class="language-{escape(fence.group(3))}"' if fence.group(3) else ""
            out.append(f"<pre><code{language}>{escape(chr(10).join(body))}</code></pre>")
            i += 1
            continue
        if line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_RULE.match(lines[i + 1]):
            close_paragraph()
            close_lists()
            head = "".join(f"<th>{_inline(c, link)}</th>" for c in _cells(line))
            rows = []
            i += 2
            while i < len(lines) and lines[i].lstrip().startswith("|"):
                rows.append("<tr>" + "".join(f"<td>{_inline(c, link)}</td>" for c in _cells(lines[i])) + "</tr>")
                i += 1
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
            continue
        heading, item = _HEADING.match(line), _ITEM.match(line)
        if not line.strip():
            close_paragraph()
        elif heading:
            close_paragraph()
            close_lists()
            level, text = len(heading.group(1)), heading.group(2)
            out.append(f'<h{level} id="{escape(slug(text))}">{_inline(text, link)}</h{level}>')
        elif item:
            close_paragraph()
            indent, kind = len(item.group(1)), "ol" if item.group(2)[0].isdigit() else "ul"
            close_lists(indent)
            if lists and lists[-1] == (indent, "ol" if kind == "ul" else "ul"):  # the other kind of list
                out.append(f"</li></{lists.pop()[1]}>")
            if lists and lists[-1][0] == indent:
                out.append("</li>")
            else:
                lists.append((indent, kind))
                out.append(f"<{kind}>")
            out.append(f"<li>{_inline(item.group(3), link)}")
        elif lists and line.startswith(" "):
            out.append(" " + _inline(line.strip(), link))  # a list item's continuation
        else:
            close_lists()
            paragraph.append(line.strip())
        i += 1
    close_paragraph()
    close_lists()
    return Markup("\n".join(out))
