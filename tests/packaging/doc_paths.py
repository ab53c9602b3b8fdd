"""Every file a shipped documentation page names, checked against what the wheel holds.

A page names a file by a relative Markdown link (`worker.md#metrics`, `images/x.png`,
`../examples/README.md`) or by a repository path in a code span (`examples/export_job.py`,
`policies/examples/http_api.yaml`, `reliable/store/batching.py`). Each must be in the wheel (the
top-level folders the build puts under reliable/defaults/ are looked up there), and a link's anchor
must be one of the page's headings. Paths of the source repository only (`tests/`, `bench/`,
`scripts/`) are allowed on a page that says so in SOURCE_NOTE's words.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: What a page naming source-only paths says, word for word.
SOURCE_NOTE = "are in reliable's source repository, not in the installed package"
SOURCE_ONLY = ("tests/", "bench/", "scripts/")

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)\)")
_CODE_PATH = re.compile(r"`((?:examples|policies|alert_rules|runbooks|docs|reliable|tests|bench|scripts)/[^`\s]*)`")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.MULTILINE)
_FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _force_included() -> dict[str, str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return dict(config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"])


def wheel_names_from_source() -> set[str]:
    """The files the wheel holds, from the build's configuration (the package, the force-included
    folders at their place in it)."""
    names = {str(p.relative_to(REPO)) for p in (REPO / "reliable").rglob("*")
             if p.is_file() and "__pycache__" not in p.parts}
    for source, target in _force_included().items():
        names |= {f"{target}/{p.relative_to(REPO / source)}" for p in (REPO / source).rglob("*")
                  if p.is_file() and "__pycache__" not in p.parts}
    return names


def _in_wheel(repo_path: str, names: set[str]) -> bool:
    """Whether the repository path (a file or a folder, no leading ./) is in the wheel."""
    path = repo_path.rstrip("/")
    for source, target in _force_included().items():
        if path == source or path.startswith(source + "/"):
            path = target + path[len(source):]
            break
    return path in names or any(name.startswith(path + "/") for name in names)


def slugs(text: str) -> set[str]:
    """The anchors of a page's headings (as reliable.web.doc_html and GitHub write them)."""
    from reliable.web.doc_html import slug

    return {slug(h) for h in _HEADING.findall(_FENCED.sub("", text))}


def problems(names: set[str], pages: Iterable[Path]) -> list[str]:
    """Every file or anchor a page names that the wheel (`names`) or the page lacks."""
    found: list[str] = []
    docs = {p.stem: p for p in (REPO / "docs").glob("*.md")}
    for page in pages:
        text = page.read_text(encoding="utf-8")
        prose = _FENCED.sub("", text)
        for target in _LINK.findall(prose):
            if re.match(r"https?://|mailto:", target):
                continue
            file, _, anchor = target.partition("#")
            if not file:
                if anchor not in slugs(text):
                    found.append(f"{page.name}: no heading for #{anchor}")
                continue
            repo_path = str((REPO / "docs" / file).resolve().relative_to(REPO)) if not file.startswith("/") else file
            if not _in_wheel(repo_path, names):
                found.append(f"{page.name}: links to {target}, not in the wheel")
            elif anchor and file.endswith(".md") and anchor not in slugs(docs[Path(file).stem].read_text()):
                found.append(f"{page.name}: {file} has no heading for #{anchor}")
        for path in _CODE_PATH.findall(prose):
            path = re.split(r"[#:*{]| ", path)[0]
            if path.startswith(SOURCE_ONLY):
                if SOURCE_NOTE not in " ".join(text.split()):
                    found.append(f"{page.name}: names {path} (source repository only) without the note")
            elif not _in_wheel(path, names):
                found.append(f"{page.name}: names {path}, not in the wheel")
    return found
