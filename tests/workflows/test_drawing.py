"""The DAG drawn as text."""

from __future__ import annotations

from reliable.workflows.drawing import STATE_COLOURS, dag_layers, dag_svg, draw_dag


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


# -- the console's SVG drawing (issue 28) -----------------------------------------------------------

def test_the_svg_lays_nodes_out_by_longest_path_and_colours_them_by_state() -> None:
    order = ["extract", "clean", "stats", "report"]
    parents = {"clean": ["extract"], "stats": ["extract"], "report": ["clean", "stats"]}
    assert dag_layers(order, parents) == {"extract": (0, 0), "clean": (1, 0), "stats": (1, 1), "report": (2, 0)}
    svg = dag_svg(order, parents, {"extract": "SUCCEEDED", "clean": "DEAD", "stats": "SUCCEEDED",
                                   "report": "UPSTREAM_FAILED"},
                  errors={"clean": "TimeoutError: row <12> & more\nsecond line", "stats": "not failed: not shown"},
                  links={"clean": "/jobs/abc"})
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count('class="edge"') == 4 and svg.count('class="node"') == 4
    assert f'fill="{STATE_COLOURS["DEAD"]}" stroke="#b00020"' in svg
    assert "TimeoutError: row &lt;12&gt; &amp; more</text>" in svg  # escaped, first line on the box
    assert "second line</title>" in svg and "not failed" not in svg
    assert '<a href="/jobs/abc">\n<g class="node" data-node="clean" data-state="DEAD">' in svg


def test_a_long_chain_and_a_late_declared_parent_get_their_own_layers() -> None:
    # "b" is declared before its parent "c": its layer still follows the longest path.
    assert dag_layers(["a", "b", "c"], {"b": ["c"], "c": ["a"]}) == {"a": (0, 0), "b": (2, 0), "c": (1, 0)}
