"""Reading policy files: the only module of the policy engine that does I/O.

The YAML itself is read by `reliable.yamlfile` (bounded, aliases counted, merge keys refused), which
keeps the line of every mapping, key and list item so that validation can name them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..errors import PolicyError
from ..yamlfile import Located, LocatedMap, load, parse

__all__ = ["Document", "parse_text", "policy_files", "read_document", "read_documents"]


@dataclass(frozen=True)
class Document:
    """One policy file: its display path and its top-level mapping.

    `builtin` marks the built-in policy's document: the documents on top of it override its keys,
    and their rules are tried before its rules (see `reliable.policy.defaults.layered`).
    """

    path: str
    root: LocatedMap
    builtin: bool = False


def _document(value: object, path: str) -> Document:
    if value is None:
        return Document(path, LocatedMap(Located(path, 1)))
    if not isinstance(value, LocatedMap):
        line = getattr(value, "line", 1)
        raise PolicyError(f"a policy file must be a mapping of sections, got {type(value).__name__}", path=path,
                          line=line)
    return Document(path, value)


def parse_text(text: str, path: str) -> Document:
    """Parse one policy document from `text`; `path` is only used in error messages."""
    return _document(parse(text, path), path)


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
    return _document(load(file, "policy file"), str(file))


def read_documents(path: str | os.PathLike[str]) -> list[Document]:
    """Read a policy file, or every *.yaml / *.yml file of a directory in name order (not recursive)."""
    return [read_document(file) for file in policy_files(path)]
