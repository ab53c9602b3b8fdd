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

import html
from collections.abc import Mapping, Sequence

from ..inputs import shorten
from ..state_tones import STATE_TONES, TONE_FILLS, tone
from ..states import FAILURE_STATES

__all__ = ["STATE_COLOURS", "dag_layers", "dag_svg", "draw_dag"]


def draw_dag(order: Sequence[str], parents: Mapping[str, Sequence[str]], labels: Mapping[str, str]) -> list[str]:
    """Lines drawing the DAG of `order` (nodes in declaration order) with `labels[node]` after each name."""
    children: dict[str, list[str]] = {name: [] for name in order}
    for name in order:
        for parent in parents.get(name, ()):
            children[parent].append(name)
    first_parent = {name: parents[name][0] for name in order if parents.get(name)}
    lines: list[str] = []
    drawn: set[str] = set()
    # Depth first with its own stack (no recursion: a chain of any length is drawn); the children
    # go on it last first, so each is drawn, with all below it, before its next sibling.
    pending: list[tuple[str, str, str, str | None]] = [
        (name, "", "", None) for name in reversed(order) if not parents.get(name)]
    while pending:
        name, prefix, connector, via = pending.pop()
        label = labels.get(name, "")
        if name in drawn or (via is not None and first_parent.get(name) != via):
            lines.append(f"{prefix}{connector}{name}  (drawn {'above' if name in drawn else 'below'})")
            continue
        drawn.add(name)
        lines.append(f"{prefix}{connector}{name}" + (f"  {label}" if label else ""))
        below = children[name]
        extension = prefix + ("" if not connector else ("    " if connector == "└── " else "│   "))
        pending.extend((child, extension, "└── " if index == len(below) - 1 else "├── ", name)
                       for index, child in reversed(list(enumerate(below))))
    return lines


#: The fill of a node's box in the SVG drawing, by state: its tone's (`reliable.state_tones`, the
#: console's one colouring of states); an unknown state is drawn in the neutral tone.
STATE_COLOURS: Mapping[str, str] = {state: TONE_FILLS[name] for state, name in STATE_TONES.items()}
_BOX_W, _BOX_H, _GAP_X, _GAP_Y, _PAD = 190, 48, 60, 22, 8


def dag_layers(order: Sequence[str], parents: Mapping[str, Sequence[str]]) -> dict[str, tuple[int, int]]:
    """Each node's (layer, row): its layer is the longest path from a root, its row its place among the
    layer's nodes in declaration order. Pure."""
    layer: dict[str, int] = {}
    # Depth first with its own stack (no recursion): a node's layer is set once its parents' are; a
    # parent on the current path (a cycle, which a declaration refuses) is not counted.
    for start in order:
        if start in layer:
            continue
        path, on_path = [start], {start}
        pending = [iter(parents.get(start, ()))]
        while pending:
            parent = next(pending[-1], None)
            if parent is None:
                pending.pop()
                name = path.pop()
                on_path.discard(name)
                layer[name] = 1 + max((layer[p] for p in parents.get(name, ()) if p in layer), default=-1)
            elif parent not in layer and parent not in on_path:
                path.append(parent)
                on_path.add(parent)
                pending.append(iter(parents.get(parent, ())))

    rows: dict[int, int] = {}
    placed: dict[str, tuple[int, int]] = {}
    for name in order:
        column = layer[name]
        placed[name] = (column, rows.get(column, 0))
        rows[column] = rows.get(column, 0) + 1
    return placed


def dag_svg(order: Sequence[str], parents: Mapping[str, Sequence[str]], states: Mapping[str, str],
            errors: Mapping[str, str] | None = None, links: Mapping[str, str] | None = None) -> str:
    """The DAG as an SVG image: a box per node coloured by its state (`STATE_COLOURS`), left to right
    by layer, an arrow per edge; a failed node's box carries its error's first line (`errors`), and
    its tooltip the whole. `links[node]`: where its box leads (the node job's page). Every text is
    escaped. Pure."""
    errors = errors or {}
    links = links or {}
    placed = dag_layers(order, parents)
    columns = 1 + max((c for c, _ in placed.values()), default=0)
    rows = 1 + max((r for _, r in placed.values()), default=0)
    width = _PAD * 2 + columns * _BOX_W + (columns - 1) * _GAP_X
    height = _PAD * 2 + rows * _BOX_H + (rows - 1) * _GAP_Y

    def at(name: str) -> tuple[int, int]:
        column, row = placed[name]
        return _PAD + column * (_BOX_W + _GAP_X), _PAD + row * (_BOX_H + _GAP_Y)

    esc = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dag" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" aria-label="workflow graph: {len(order)} nodes">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#666"/></marker></defs>']
    for child in order:
        cx, cy = at(child)
        for parent in parents.get(child, ()):
            if parent not in placed:
                continue
            px, py = at(parent)
            x1, y1, x2, y2 = px + _BOX_W, py + _BOX_H // 2, cx, cy + _BOX_H // 2
            middle = (x1 + x2) // 2
            out.append(f'<path class="edge" d="M{x1},{y1} C{middle},{y1} {middle},{y2} {x2},{y2}" fill="none" '
                       'stroke="#666" stroke-width="1.4" marker-end="url(#arrow)"/>')
    for name in order:
        x, y = at(name)
        state = states.get(name, "")
        error = errors.get(name) if state in FAILURE_STATES else None
        fill = TONE_FILLS[tone(state)]
        stroke = "#b00020" if state in FAILURE_STATES else "#555"
        tip = f"{name}: {state}" + (f"\n{error}" if error else "")
        box = [f'<g class="node" data-node="{esc(name)}" data-state="{esc(state)}">',
               f"<title>{esc(tip)}</title>",
               f'<rect x="{x}" y="{y}" width="{_BOX_W}" height="{_BOX_H}" rx="6" fill="{fill}" stroke="{stroke}" '
               f'stroke-width="{2 if state in FAILURE_STATES else 1}"/>',
               f'<text x="{x + 8}" y="{y + 18}" font-size="13" font-weight="600">{esc(shorten(name, 24))}</text>',
               f'<text x="{x + 8}" y="{y + 36}" font-size="11" fill="{"#b00020" if error else "#333"}">'
               f'{esc(shorten(error.splitlines()[0] if error else state, 30))}</text>', "</g>"]
        if name in links:
            box = [f'<a href="{esc(links[name])}">', *box, "</a>"]
        out.extend(box)
    out.append("</svg>")
    return "\n".join(out)
