"""Issue 38: a deep workflow is declared, submitted, drawn and shown (no recursion limit), and one
past MAX_NODES is refused at declaration naming the limit.

A 1,500-node chain made `reliable workflow show` fail (recursion in `draw_dag`) and, declared leaf
first, `submit()` (the topological sort); nothing bounded a workflow's size.
"""

from __future__ import annotations

import sys
from typing import Any

import dramatiq
import pytest
from click.testing import CliRunner

import reliable
from reliable.cli.main import cli
from reliable.workflows.definition import MAX_NODES, Node, WorkflowDefinitionError, topological
from reliable.workflows.drawing import dag_layers, dag_svg, draw_dag

Harness = Any
#: Deeper than Python's recursion limit, whatever it is set to here.
DEPTH = max(3000, sys.getrecursionlimit() + 500)


def chain(length: int) -> dict[str, tuple[str, ...]]:
    """n0 <- n1 <- ... : each node's parents, leaf first (the order that recursed deepest)."""
    return {f"n{i}": ((f"n{i - 1}",) if i else ()) for i in reversed(range(length))}


def test_graph_algorithms_take_a_chain_deeper_than_the_recursion_limit() -> None:
    parents = chain(DEPTH)
    order = topological(parents)
    assert order == [f"n{i}" for i in range(DEPTH)]
    declared = list(parents)  # leaf first
    lines = draw_dag(declared, parents, {"n0": "SUCCEEDED"})
    assert len(lines) == DEPTH and lines[0] == "n0  SUCCEEDED" and lines[-1].endswith(f"└── n{DEPTH - 1}")
    layers = dag_layers(declared, parents)
    assert layers[f"n{DEPTH - 1}"] == (DEPTH - 1, 0) and layers["n0"] == (0, 0)
    assert dag_svg(declared[:1500], parents, {}).count('class="node"') == 1500


def test_a_cycle_deeper_than_the_recursion_limit_is_still_named() -> None:
    parents = chain(DEPTH)
    parents["n0"] = (f"n{DEPTH - 1}",)
    with pytest.raises(WorkflowDefinitionError, match="the workflow has a cycle: n"):
        topological(parents)


def test_more_nodes_than_the_limit_is_refused_at_declaration() -> None:
    nodes = [Node(f"n{i}", "step", "default") for i in range(MAX_NODES + 1)]
    with pytest.raises(WorkflowDefinitionError,
                       match=rf"workflow 'big' has {MAX_NODES + 1} nodes, more than the limit of {MAX_NODES} "):
        reliable.workflow("big", nodes)
    assert len(reliable.workflow("big", nodes[:MAX_NODES]).nodes) == MAX_NODES


def test_a_deep_chain_declared_leaf_first_is_submitted_and_shown(harness: Harness, store_url: str) -> None:
    @dramatiq.actor(queue_name="default")
    def step(name: str) -> str:
        return name

    length = 1500
    nodes = [reliable.node(f"n{i}", step.message(i), after=[f"n{i - 1}"] if i else [])
             for i in reversed(range(length))]
    workflow_id = reliable.workflow("deep", nodes).submit(harness.broker)
    shown = CliRunner().invoke(cli, ["workflow", "show", workflow_id, "--store", store_url],
                               env={"RELIABLE_OPERATOR": "carol", "COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output[-2000:]
    assert "n0  " in shown.output and f"└── n{length - 1}  " in shown.output
