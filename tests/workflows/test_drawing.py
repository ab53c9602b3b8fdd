"""The DAG drawn as text."""

from __future__ import annotations

from reliable.workflows.drawing import draw_dag


def test_a_diamond_draws_the_fan_in_once_and_refers_to_it() -> None:
    order = ["extract", "clean", "stats", "report"]
    parents = {"clean": ["extract"], "stats": ["extract"], "report": ["clean", "stats"]}
    labels = {"extract": "SUCCEEDED", "clean": "FAILED  ValueError: bad row", "stats": "SUCCEEDED",
              "report": "UPSTREAM_FAILED"}
    assert draw_dag(order, parents, labels) == [
        "extract  SUCCEEDED",
        "├── clean  FAILED  ValueError: bad row",
        "│   └── report  UPSTREAM_FAILED",
        "└── stats  SUCCEEDED",
        "    └── report  (drawn above)",
    ]


def test_a_fan_in_is_drawn_under_its_first_parent_even_when_reached_first_elsewhere() -> None:
    order = ["b", "a", "j"]
    parents = {"j": ["a", "b"]}
    assert draw_dag(order, parents, {}) == ["b", "└── j  (drawn below)", "a", "└── j"]


def test_several_roots_and_deep_chains() -> None:
    order = ["r1", "r2", "x", "y"]
    parents = {"x": ["r1"], "y": ["x"]}
    assert draw_dag(order, parents, {"y": "WAITING"}) == ["r1", "└── x", "    └── y  WAITING", "r2"]
