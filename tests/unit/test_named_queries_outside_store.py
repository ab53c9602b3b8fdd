"""Outside reliable/store/, no query is called by its string name and no store row is read by position.

Features reach the store's named queries only through its typed query modules
(reliable/store/*_queries.py), whose rows are dataclasses with named fields: a reordered column is
then a failing test (tests/store/test_named_rows.py), never a silent wrong read. This test walks the
package with `ast` (nothing is imported but the query names) and fails on:

- a call of `.one` / `.rows` / `.run` given a string literal naming a store query, or made on a
  store or unit of work (a receiver spelled `store`, `self.store`, `unit`, ...) whatever its arguments;
- a positional read of a store row: `row[0]`, `row[2:7]`, `rows[0][6]`, or a tuple unpacking of a
  row (`a, b = row`, `for a, b in rows`), where the row came, in the same function, from such a call.

The typed modules' rows are dataclasses, not tuples: `row[0]` or `a, b = row` on one of them is a
type error `mypy --strict reliable` reports (tests/store/test_named_rows.py checks each is one).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from reliable.store.sqlrunner import load_queries

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "reliable"
STORE = PACKAGE_ROOT / "store"

#: Every named query of either dialect.
QUERY_NAMES = frozenset(load_queries("postgresql")) | frozenset(load_queries("sqlite"))
_UNIT_METHODS = frozenset({"one", "rows", "run"})
_STORE_RECEIVERS = ("store", "unit")


def _is_index(node: ast.expr) -> bool:
    """An integer index or a slice of integer bounds: a positional read."""
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return _is_index(node.operand)
    if isinstance(node, ast.Slice):
        bounds = [b for b in (node.lower, node.upper, node.step) if b is not None]
        return all(_is_index(b) for b in bounds)
    return False


def _receiver(node: ast.expr) -> str:
    """The last name of a call's receiver: `self.store` -> "store", `unit` -> "unit"."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


class _Walker(ast.NodeVisitor):
    """Finds string-named calls and positional reads of store rows in one module."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self._bound: list[dict[str, str]] = [{}]  # name -> "row" or "rows", per function scope

    def _kind(self, node: ast.expr) -> str | None:
        """"row" (one row by position), "rows" (a list of them) or None for anything else."""
        if isinstance(node, ast.Name):
            return self._bound[-1].get(node.id)
        if isinstance(node, ast.Subscript) and self._kind(node.value) == "rows":
            return "rows" if isinstance(node.slice, ast.Slice) else "row"
        if not isinstance(node, ast.Call):
            return None
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("reversed", "list", "sorted", "iter") and node.args:
            return "rows" if self._kind(node.args[0]) == "rows" else None
        if isinstance(func, ast.Attribute) and func.attr in ("one", "rows") and (
                _on_store(func) or (node.args and _names_query(node.args[0]))):
            return "row" if func.attr == "one" else "rows"
        return None

    def _bind(self, target: ast.expr, kind: str | None, line: int) -> None:
        if kind is None:
            return
        if isinstance(target, ast.Name):
            self._bound[-1][target.id] = kind
        elif isinstance(target, (ast.Tuple, ast.List)) and kind == "row":
            self.found.append((line, f"unpacks a store row by position: {ast.unparse(target)}"))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._bound.append({})
        self.generic_visit(node)
        self._bound.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _UNIT_METHODS:
            if node.args and _names_query(node.args[0]):
                self.found.append((node.lineno, f"calls the named query {ast.unparse(node.args[0])} by its name"))
            elif _on_store(func):
                self.found.append((node.lineno, f"calls {ast.unparse(func)}() on the store by a query's name"))
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._bind(target, self._kind(node.value), node.lineno)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._bind(node.target, self._kind(node.value), node.lineno)
        self.generic_visit(node)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self._bind(node.target, self._kind(node.value), node.lineno)
        self.generic_visit(node)

    def _iterate(self, target: ast.expr, source: ast.expr, line: int) -> None:
        if self._kind(source) == "rows":
            self._bind(target, "row", line)

    def visit_For(self, node: ast.For) -> None:
        self._iterate(node.target, node.iter, node.lineno)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self._iterate(node.target, node.iter, node.target.lineno)
        self.generic_visit(node)

    def _comprehension(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp | ast.DictComp) -> None:
        # Generators first: their targets are bound before the element reads them.
        for generator in node.generators:
            self.visit(generator)
        for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
            self.visit(part)

    visit_ListComp = visit_SetComp = visit_GeneratorExp = visit_DictComp = _comprehension

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if _is_index(node.slice) and self._kind(node.value) == "row":
            self.found.append((node.lineno, f"reads a store row by position: {ast.unparse(node)}"))
        self.generic_visit(node)


def _on_store(func: ast.Attribute) -> bool:
    """A call made on a store or a unit of work: `store.one`, `self.store.run`, `unit.rows`, `self._store.one`."""
    return _receiver(func.value).lstrip("_").endswith(_STORE_RECEIVERS)


def _names_query(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in QUERY_NAMES


def violations(source: str) -> list[tuple[int, str]]:
    """(line, what) for every string-named query call and positional store-row read in `source`."""
    walker = _Walker()
    walker.visit(ast.parse(source))
    return sorted(set(walker.found))


def _outside_store() -> Iterator[Path]:
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        if STORE not in path.parents:
            yield path


def test_no_module_outside_the_store_calls_a_query_by_name_or_reads_a_row_by_position() -> None:
    found = [f"{path.relative_to(PACKAGE_ROOT.parent)}:{line}: {what}"
             for path in _outside_store() for line, what in violations(path.read_text(encoding="utf-8"))]
    assert found == [], "use a typed function of reliable/store/*_queries.py instead:\n" + "\n".join(found)


def test_the_walk_sees_every_python_module_outside_the_store() -> None:
    walked = {p.relative_to(PACKAGE_ROOT).parts[0] for p in _outside_store()}
    assert {"limits", "schedules", "queue_pauses.py", "worker", "web"} <= walked
    assert "store" not in walked


# The shapes the walk must catch: each is what features did before their typed queries (and fails).
_FAILING = {
    "a string-named call in a unit": (
        "def f(store):\n"
        "    with store.transaction() as unit:\n"
        "        unit.run('limit_ensure', {'name': 'a', 'declared': 1})\n", [3]),
    "a string-named call on the store": (
        "def f(self):\n"
        "    self.store.run('limit_release_slot', {})\n", [2]),
    "a query name held in a variable": (
        "def f(store, name):\n"
        "    return store.one(name, {})\n", [2]),
    "a query name passed to another receiver": (
        "def f(runner):\n"
        "    return runner.rows('due_schedules', {'at': 0})\n", [2]),
    "a positional read of a row": (
        "def f(self, params):\n"
        "    row = self.store.one('limit_acquire_slot', params)\n"
        "    return row[0], row[2:7], float(row[7])\n", [2, 3]),
    "a positional read of a listed row": (
        "def f(store):\n"
        "    rows = store.rows('list_queue_pauses')\n"
        "    return float(rows[0][6]) if rows else 0.0\n", [2, 3]),
    "a positional read in a comprehension": (
        "def f(store):\n"
        "    rows = store.rows('list_queue_events', {})\n"
        "    return [r[0] for r in reversed(rows)]\n", [2, 3]),
    "a row unpacked in a for loop": (
        "def f(self):\n"
        "    return [(k, s) for k, s, j in\n"
        "            self.store.rows('limit_holders', {})]\n", [2, 3]),
    "a row unpacked by assignment": (
        "def f(unit):\n"
        "    if (row := unit.one('limit_take_token', {})) is not None:\n"
        "        bucket, best, now = row\n", [2, 3]),
}


@pytest.mark.parametrize("case", sorted(_FAILING))
def test_the_walk_fails_on_each_way_of_calling_by_name_or_reading_by_position(case: str) -> None:
    source, lines = _FAILING[case]
    assert sorted({line for line, _ in violations(source)}) == lines


def test_named_reads_of_typed_rows_and_other_calls_named_run_pass() -> None:
    source = ("from ..store import limit_queries, pause_queries\n"
              "def f(unit, supervisor, engine, parts):\n"
              "    row = limit_queries.lock(unit, 'a')\n"
              "    supervisor.run()\n"
              "    engine.run(5, 'now-ish')\n"
              "    first = pause_queries.list_paused(unit)[0].now\n"
              "    return row.declared, parts[0], first, [h.slot for h in limit_queries.holders(unit, 'a')]\n")
    assert violations(source) == []
