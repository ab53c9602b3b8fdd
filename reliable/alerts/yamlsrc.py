"""YAML loading that remembers where every value came from (file and line), for precise errors."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..errors import PolicyError

__all__ = ["Located", "LocatedMap", "LocatedSeq", "load_located", "parse_located"]


class _LineLoader(yaml.SafeLoader):
    """A safe loader (no Python tags) whose mappings and sequences record their lines."""


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

    where: Located
    key_lines: dict[str, int]

    def at(self, key: str) -> Located:
        """The place of `key` (or of the mapping when the key is absent)."""
        return Located(self.where.path, self.key_lines.get(key, self.where.line))


class LocatedSeq(list[Any]):
    """A YAML sequence with the place of the sequence and of each item."""

    where: Located
    item_lines: list[int]

    def at(self, index: int) -> Located:
        """The place of item `index`."""
        return Located(self.where.path, self.item_lines[index])


def _convert(loader: _LineLoader, node: yaml.Node, path: str) -> Any:
    where = Located(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        result = LocatedMap()
        result.where = where
        result.key_lines = {}
        loader.flatten_mapping(node)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise PolicyError(f"keys must be strings, got {key!r}", path=path, line=line)
            if key in result:
                raise PolicyError(f"duplicate key {key!r}", path=path, line=line, field=key)
            result[key] = _convert(loader, value_node, path)
            result.key_lines[key] = line
        return result
    if isinstance(node, yaml.SequenceNode):
        seq = LocatedSeq(_convert(loader, item, path) for item in node.value)
        seq.where = where
        seq.item_lines = [item.start_mark.line + 1 for item in node.value]
        return seq
    return loader.construct_object(node, deep=True)


def parse_located(text: str, path: str) -> Any:
    """Parse one YAML document into LocatedMap / LocatedSeq / scalars; PolicyError on bad YAML."""
    loader = _LineLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        return _convert(loader, node, path)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyError(f"invalid YAML: {exc.problem or exc}", path=path, line=line) from None
    except yaml.YAMLError as exc:
        raise PolicyError(f"invalid YAML: {exc}", path=path) from None
    finally:
        loader.dispose()


def load_located(path: Path) -> Any:
    """Read and parse a YAML file with places (see parse_located)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(f"cannot read: {exc.strerror}", path=str(path)) from None
    return parse_located(text, str(path))
