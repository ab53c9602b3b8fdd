"""The one YAML loader: every file reliable reads (policies, operators, alert rules and settings, schedules).

A file is read only up to `MAX_BYTES`; its events come from PyYAML's parser (libyaml's when
installed) and are composed here, without recursion, under three bounds checked as each event
arrives, so that a hostile file is refused in milliseconds with its file and line:

- nesting deeper than `MAX_DEPTH` mappings and lists;
- more than `MAX_NODES` values once aliases are expanded: an alias (`*name`) counts at the full size
  of its anchor, so the "billion laughs" file (nested aliases doubling at each level) is refused at
  the alias that crosses the budget instead of expanding for minutes and gigabytes;
- an alias inside its own anchor (a recursive value), merge keys (`<<`), more than one document.

`parse` turns the nodes into `LocatedMap` / `LocatedSeq` / scalars that remember the line of every
mapping, key and list item, for validation errors naming file, line and field; `compose` returns
the bounded nodes themselves (the operators policy reads scalars as written). Every error is a
`PolicyError` with path and line. Nothing here knows what a file means.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.events import (
    AliasEvent,
    CollectionEndEvent,
    DocumentStartEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from .errors import PolicyError

__all__ = ["MAX_BYTES", "MAX_DEPTH", "MAX_NODES", "Located", "LocatedMap", "LocatedSeq", "compose", "load",
           "parse", "read_text"]

#: The largest file read, in bytes (policies and rule files are a few kilobytes).
MAX_BYTES = 256 * 1024
#: The deepest nesting of mappings and lists.
MAX_DEPTH = 64
#: The most values (scalars, mappings, lists) in one file, aliases counted at their expanded size.
MAX_NODES = 20_000

_MERGE_TAG = "tag:yaml.org,2002:merge"
_COLLECTION_TAGS = frozenset({"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"})
# libyaml's parser when PyYAML was built with it (10x faster); composing stays ours either way.
_PARSER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class Located:
    """Where a value sits: the file and the 1-based line."""

    path: str
    line: int

    def error(self, message: str, field: str | None = None) -> PolicyError:
        """A PolicyError pointing at this place."""
        return PolicyError(message, path=self.path, line=self.line, field=field)


class LocatedMap(dict[str, Any]):
    """A YAML mapping with the place of the mapping and of each key."""

    def __init__(self, where: Located, items: dict[str, Any] | None = None,
                 key_lines: dict[str, int] | None = None) -> None:
        super().__init__(items or {})
        self.where = where
        self.key_lines: dict[str, int] = dict(key_lines or {})

    @property
    def line(self) -> int:
        """The line of the mapping."""
        return self.where.line

    def key_line(self, key: str) -> int:
        """The line of `key`, or of the mapping when the key is absent."""
        return self.key_lines.get(key, self.where.line)

    def at(self, key: str) -> Located:
        """The place of `key` (or of the mapping when the key is absent)."""
        return Located(self.where.path, self.key_line(key))


class LocatedSeq(list[Any]):
    """A YAML sequence with the place of the sequence and of each item."""

    def __init__(self, where: Located, items: list[Any] | None = None, item_lines: list[int] | None = None) -> None:
        super().__init__(items or [])
        self.where = where
        self.item_lines: list[int] = list(item_lines or [])

    @property
    def line(self) -> int:
        """The line of the sequence."""
        return self.where.line

    def at(self, index: int) -> Located:
        """The place of item `index`."""
        return Located(self.where.path, self.item_lines[index])


def _line(node_or_event: Any) -> int:
    return int(node_or_event.start_mark.line) + 1


def _one_line(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = [part for part in (exc.context, exc.problem) if part]
        return "; ".join(" ".join(str(p).split()) for p in parts) or "invalid YAML"
    return " ".join(str(exc).split())


class _Open:
    """A mapping or list being composed: its start event, anchor and the nodes read so far."""

    __slots__ = ("anchor", "event", "height", "items", "size")

    def __init__(self, event: MappingStartEvent | SequenceStartEvent) -> None:
        self.event = event
        self.anchor = event.anchor
        self.items: list[Node] = []
        self.size = 1
        self.height = 1


class _Composer:
    """Events -> nodes, bounded (see the module docstring). Aliases share their anchor's node."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.resolver: Any = yaml.resolver.Resolver()
        self.stack: list[_Open] = []
        self.anchors: dict[str, tuple[Node, int, int]] = {}
        self.expanded = 0
        self.root: Node | None = None
        self.documents = 0

    def fail(self, message: str, event: Any) -> PolicyError:
        return PolicyError(message, path=self.path, line=_line(event))

    def feed(self, event: Any) -> None:
        if isinstance(event, DocumentStartEvent):
            self.documents += 1
            if self.documents > 1:
                raise self.fail("one YAML document per file (found a second '---')", event)
        elif isinstance(event, ScalarEvent):
            tag = event.tag
            if tag is None or tag == "!":
                tag = self.resolver.resolve(ScalarNode, event.value, event.implicit)
            marks: tuple[Any, Any] = (event.start_mark, event.end_mark)
            self.add(ScalarNode(tag, event.value, *marks, style=event.style), 1, 1, event.anchor, event)
        elif isinstance(event, AliasEvent):
            if any(item.anchor == event.anchor for item in self.stack):
                raise self.fail(f"the alias *{event.anchor} is inside its own anchor (a recursive value)", event)
            if event.anchor not in self.anchors:
                raise self.fail(f"the alias *{event.anchor} names no anchor defined before it", event)
            node, size, height = self.anchors[event.anchor]
            self.add(node, size, height, None, event)
        elif isinstance(event, MappingStartEvent | SequenceStartEvent):
            self.count(1, 1, event)
            self.stack.append(_Open(event))
        elif isinstance(event, CollectionEndEvent):
            done = self.stack.pop()
            start: Any = done.event
            tag = start.tag
            begin: Any = start.start_mark
            end: Any = event.end_mark
            made: Node
            if isinstance(start, MappingStartEvent):
                if tag is None or tag == "!":
                    tag = self.resolver.resolve(MappingNode, None, start.implicit)
                pairs = list(zip(done.items[::2], done.items[1::2], strict=True))
                for key, _ in pairs:
                    if key.tag == _MERGE_TAG:
                        raise PolicyError("YAML merge keys (<<) are not supported; repeat the keys",
                                          path=self.path, line=_line(key))
                made = MappingNode(tag, pairs, begin, end, flow_style=start.flow_style)
            else:
                if tag is None or tag == "!":
                    tag = self.resolver.resolve(SequenceNode, None, start.implicit)
                made = SequenceNode(tag, done.items, begin, end, flow_style=start.flow_style)
            self.attach(made, done.size, done.height, done.anchor)

    def count(self, size: int, height: int, event: Any) -> None:
        self.expanded += size
        if self.expanded > MAX_NODES:
            raise self.fail(f"more than {MAX_NODES} values (aliases counted at their expanded size): "
                            "too large for a reliable file", event)
        if len(self.stack) + height > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels", event)

    def add(self, node: Node, size: int, height: int, anchor: str | None, event: Any) -> None:
        self.count(size, height, event)
        self.attach(node, size, height, anchor)

    def attach(self, node: Node, size: int, height: int, anchor: str | None) -> None:
        if anchor is not None:
            self.anchors[anchor] = (node, size, height)
        if not self.stack:
            self.root = node
            return
        parent = self.stack[-1]
        parent.items.append(node)
        parent.size += size
        parent.height = max(parent.height, height + 1)


def compose(text: str, path: str) -> Node | None:
    """The bounded node graph of one YAML document (None when empty); PolicyError naming `path` and line."""
    composer = _Composer(path)
    try:
        for event in yaml.parse(text, Loader=_PARSER):
            composer.feed(event)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = int(mark.line) + 1 if mark is not None else None
        raise PolicyError(f"invalid YAML: {_one_line(exc)}", path=path, line=line) from None
    return composer.root


class _Converter:
    """Nodes -> LocatedMap / LocatedSeq / scalars (bounded by compose: at most MAX_NODES values)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.constructor = yaml.constructor.SafeConstructor()

    def convert(self, node: Node) -> Any:
        where = Located(self.path, _line(node))
        if isinstance(node, MappingNode | SequenceNode) and node.tag not in _COLLECTION_TAGS:
            raise PolicyError(f"unsupported YAML tag {node.tag!r}", path=self.path, line=where.line)
        if isinstance(node, MappingNode):
            result = LocatedMap(where)
            for key_node, value_node in node.value:
                key = self.convert(key_node)
                line = _line(key_node)
                if not isinstance(key, str):
                    raise PolicyError(f"keys must be strings, got {key!r}; quote it", path=self.path, line=line)
                if key in result:
                    raise PolicyError(f"duplicate key {key!r}: defined twice in one mapping (lines "
                                      f"{result.key_lines[key]} and {line})", path=self.path, line=line, field=key)
                result[key] = self.convert(value_node)
                result.key_lines[key] = line
            return result
        if isinstance(node, SequenceNode):
            return LocatedSeq(where, [self.convert(item) for item in node.value],
                              [_line(item) for item in node.value])
        try:
            return self.constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise PolicyError(f"invalid YAML value: {_one_line(exc)}", path=self.path, line=where.line) from None


def parse(text: str, path: str) -> Any:
    """One YAML document as LocatedMap / LocatedSeq / scalars (None when empty); `path` names it in errors."""
    node = compose(text, path)
    return None if node is None else _Converter(path).convert(node)


def read_text(path: str | os.PathLike[str], what: str = "file") -> str:
    """The UTF-8 text of `path`, refused above MAX_BYTES; PolicyError (`what` names the kind of file)."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise PolicyError(f"cannot read {what}: {exc.strerror}", path=name) from None
    if len(data) > MAX_BYTES:
        raise PolicyError(f"{what} larger than {MAX_BYTES // 1024} KiB: refused", path=name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise PolicyError(f"cannot read {what}: not UTF-8 text", path=name, line=line) from None


def load(path: str | os.PathLike[str], what: str = "file") -> Any:
    """Read and parse the YAML file at `path` (see `parse` and `read_text`)."""
    return parse(read_text(path, what), str(path))
