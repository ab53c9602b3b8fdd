"""What the workflow modules share below each other (definition, planning, engine): the DAG's
order and reachability, a node's input digest, and the definition error. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from ..errors import ConfigError

if TYPE_CHECKING:
    from .definition import Node

__all__ = ["WorkflowDefinitionError", "descendants", "input_digest", "topological"]


class WorkflowDefinitionError(ConfigError, ValueError):
    """A workflow declaration that cannot run: the message names the node and the field."""


def input_digest(each: Node, code_version: str | None) -> str:
    """What identifies a node's inputs: actor, queue, arguments and the actor's declared code version.

    A resume recomputes a succeeded node (and what depends on it) when this changed.
    """
    canonical = json.dumps({"actor": each.actor, "queue": each.queue, "args": list(each.args),
                            "kwargs": dict(each.kwargs), "code_version": code_version},
                           sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def topological(parents: Mapping[str, Sequence[str]]) -> list[str]:
    """The nodes in an order where every node comes after its parents (declaration order kept
    among nodes that are free); raises WorkflowDefinitionError naming a cycle.

    A depth-first walk with its own stack (no recursion: a chain of any length, declared in any
    order, is sorted), each node placed after all its parents."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: placed
    for root in parents:
        if state.get(root) == 2:
            continue
        path = [root]
        state[root] = 1
        pending = [iter(parents[root])]
        while pending:
            parent = next(pending[-1], None)
            if parent is None:  # every parent of path[-1] placed: place it
                pending.pop()
                done = path.pop()
                state[done] = 2
                order.append(done)
            elif state.get(parent) == 1:
                cycle = [*path[path.index(parent):], parent]
                raise WorkflowDefinitionError("the workflow has a cycle: " + " -> ".join(cycle))
            elif state.get(parent) != 2:
                state[parent] = 1
                path.append(parent)
                pending.append(iter(parents[parent]))
    return order


def descendants(children: Mapping[str, Sequence[str]], roots: Iterable[str]) -> set[str]:
    """Every node reachable from `roots` (the roots included)."""
    found: set[str] = set()
    pending = list(roots)
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending.extend(children.get(name, ()))
    return found
