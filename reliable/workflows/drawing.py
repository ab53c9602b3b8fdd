"""A workflow's DAG drawn as text, each node with its state. Pure.

    extract  SUCCEEDED
    ├── clean  FAILED  ValueError: row 12 has no date
    │   └── report  UPSTREAM_FAILED
    └── stats  SUCCEEDED
        └── report  (drawn above)

Each node is drawn in full under its first parent (declaration order); under its other parents it
is a reference, so a fan-in appears once with its subtree and the drawing stays a tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["draw_dag"]


def draw_dag(order: Sequence[str], parents: Mapping[str, Sequence[str]], labels: Mapping[str, str]) -> list[str]:
    """Lines drawing the DAG of `order` (nodes in declaration order) with `labels[node]` after each name."""
    children: dict[str, list[str]] = {name: [] for name in order}
    for name in order:
        for parent in parents.get(name, ()):
            children[parent].append(name)
    first_parent = {name: parents[name][0] for name in order if parents.get(name)}
    lines: list[str] = []
    drawn: set[str] = set()

    def draw(name: str, prefix: str, connector: str, via: str | None) -> None:
        label = labels.get(name, "")
        if name in drawn or (via is not None and first_parent.get(name) != via):
            lines.append(f"{prefix}{connector}{name}  (drawn {'above' if name in drawn else 'below'})")
            return
        drawn.add(name)
        lines.append(f"{prefix}{connector}{name}" + (f"  {label}" if label else ""))
        below = children[name]
        extension = prefix + ("" if not connector else ("    " if connector == "└── " else "│   "))
        for index, child in enumerate(below):
            draw(child, extension, "└── " if index == len(below) - 1 else "├── ", name)

    for name in order:
        if not parents.get(name):
            draw(name, "", "", None)
    return lines
