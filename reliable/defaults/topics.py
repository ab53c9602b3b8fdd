"""The documentation as topics: `reliable docs [TOPIC]` and the console's /docs read them here.

The pages are the repository's docs/*.md, shipped in the wheel (see `reliable.defaults`); a topic is
a page's file name without `.md`. A reference as the code and the messages write it
("docs/postgresql-failover.md#promotion", "postgresql-failover.md", "postgresql-failover") names
the same topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from . import path

__all__ = ["Topic", "find", "name_of", "topics"]

_TITLE = re.compile(r"^#\s+(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class Topic:
    """One page: its topic name, its first heading and where it is on disk."""

    name: str
    title: str
    file: Path

    def text(self) -> str:
        """The page's Markdown."""
        return self.file.read_text(encoding="utf-8")


def _topic(file: Path) -> Topic:
    found = _TITLE.search(file.read_text(encoding="utf-8"))
    return Topic(file.stem, found.group(1) if found else file.stem, file)


def topics() -> tuple[Topic, ...]:
    """Every page, by topic name."""
    return tuple(_topic(file) for file in sorted(path("docs").glob("*.md")))


def name_of(reference: str) -> str:
    """The topic a reference names: "docs/worker.md#metrics", "worker.md" and "worker" all name "worker"."""
    name = reference.strip().split("#", 1)[0].removeprefix("./")
    name = name.removeprefix("docs/").removesuffix(".md")
    return name.lower()


def find(reference: str) -> Topic:
    """The topic `reference` names; a ConfigError listing the topics when there is none."""
    name = name_of(reference)
    file = path("docs") / f"{name}.md"
    if "/" in name or not name or not file.is_file():
        known = ", ".join(t.name for t in topics())
        raise ConfigError(f"no documentation topic {reference!r}; the topics: {known}")
    return _topic(file)
