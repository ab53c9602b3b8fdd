"""Reading policy YAML with line numbers: the only module of the policy engine that does I/O.

PyYAML composes each file into nodes (which carry their marks); we turn the nodes into plain
values, keeping the line of every mapping, key and list item so validation can name them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ..errors import PolicyError

__all__ = ["Document", "YList", "YMap", "parse_text", "policy_files", "read_document", "read_documents"]


class YMap(dict[str, Any]):
    """A YAML mapping that remembers its own line and the line of each key (1-based)."""

    line: int
    key_lines: dict[str, int]

    def key_line(self, key: str) -> int:
        """The line of `key`, or of the mapping when the key is absent."""
        return self.key_lines.get(key, self.line)


class YList(list[Any]):
    """A YAML sequence that remembers its own line and the line of each item (1-based)."""

    line: int
    item_lines: list[int]


@dataclass(frozen=True)
class Document:
    """One policy file: its display path and its top-level mapping.

    `builtin` marks the built-in policy's document: the documents on top of it override its keys,
    and their rules are tried before its rules (see `reliable.policy.defaults.layered`).
    """

    path: str
    root: YMap
    builtin: bool = False


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


class _Converter:
    """Turns composed nodes into YMap / YList / scalars (anchors and aliases are followed)."""

    def __init__(self, loader: yaml.SafeLoader, path: str) -> None:
        self.loader = loader
        self.path = path

    def convert(self, node: Node) -> Any:
        if isinstance(node, MappingNode):
            return self._mapping(node)
        if isinstance(node, SequenceNode):
            out = YList()
            out.line = _line(node)
            out.item_lines = []
            for item in node.value:
                out.append(self.convert(item))
                out.item_lines.append(_line(item))
            return out
        if isinstance(node, ScalarNode):
            try:
                return self.loader.construct_object(node, deep=True)
            except yaml.YAMLError as exc:
                raise PolicyError(f"bad YAML value: {_one_line(exc)}", path=self.path, line=_line(node)) from None
        raise PolicyError("unsupported YAML node", path=self.path, line=_line(node))  # pragma: no cover

    def _mapping(self, node: MappingNode) -> YMap:
        out = YMap()
        out.line = _line(node)
        out.key_lines = {}
        for key_node, value_node in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise PolicyError("YAML merge keys (<<) are not supported; repeat the keys", path=self.path,
                                  line=_line(key_node))
            key = self.convert(key_node)
            if not isinstance(key, str):
                raise PolicyError(f"keys must be strings, got {key!r}; quote it", path=self.path,
                                  line=_line(key_node))
            if key in out:
                raise PolicyError(f"key {key!r} is defined twice in one mapping (lines {out.key_lines[key]} and "
                                  f"{_line(key_node)})", path=self.path, line=_line(key_node), field=key)
            out[key] = self.convert(value_node)
            out.key_lines[key] = _line(key_node)
        return out


def _one_line(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.MarkedYAMLError):
        parts = [part for part in (exc.context, exc.problem) if part]
        return "; ".join(" ".join(str(p).split()) for p in parts) or "invalid YAML"
    return " ".join(str(exc).split())


def parse_text(text: str, path: str) -> Document:
    """Parse one policy document from `text`; `path` is only used in error messages."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            root = YMap()
            root.line, root.key_lines = 1, {}
            return Document(path, root)
        value = _Converter(loader, path).convert(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = int(mark.line) + 1 if mark is not None else None
        raise PolicyError(f"bad YAML: {_one_line(exc)}", path=path, line=line) from None
    finally:
        loader.dispose()
    if not isinstance(value, YMap):
        raise PolicyError(f"a policy file must be a mapping of sections, got {type(value).__name__}", path=path,
                          line=_line(node))
    return Document(path, value)


def policy_files(path: str | os.PathLike[str]) -> list[Path]:
    """The policy file at `path`, or every *.yaml / *.yml file of the directory in name order (not recursive)."""
    base = Path(path)
    if base.is_dir():
        files = sorted((p for p in base.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml")),
                       key=lambda p: p.name)
        if not files:
            raise PolicyError("no *.yaml or *.yml policy files in this directory", path=str(base))
        return files
    if base.exists():
        return [base]
    raise PolicyError("no such policy file or directory", path=str(base))


def read_document(file: Path) -> Document:
    """Read and parse one policy file (PolicyError when it cannot be read or is not valid YAML)."""
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise PolicyError(f"cannot read policy file: {reason}", path=str(file)) from None
    return parse_text(text, str(file))


def read_documents(path: str | os.PathLike[str]) -> list[Document]:
    """Read a policy file, or every *.yaml / *.yml file of a directory in name order (not recursive)."""
    return [read_document(file) for file in policy_files(path)]
