"""No module outside reliable/store/ reaches into the store's private parts: features use its public
unit of work (StateStore.transaction / run / rows / one). The private names are read from the
store's own classes, so a new private attribute is covered as soon as it exists."""

from __future__ import annotations

import ast
from pathlib import Path

import reliable

PACKAGE = Path(reliable.__file__).parent
#: The modules whose classes' private names no other package may use.
STORE_MODULES = ("store/store.py", "store/sqlrunner.py", "store/unit_of_work.py")


def _private_names(source: str) -> set[str]:
    """The private methods of the module's classes and the private attributes they set on self."""
    names: set[str] = set()
    for cls in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)):
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                  and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)
    return {n for n in names if n.startswith("_") and not n.startswith("__")}


def _uses(source: str, names: set[str]) -> list[str]:
    """`x._name` expressions (x other than self/cls) whose attribute is one of `names`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Attribute) and node.attr in names
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def _store_private_names() -> set[str]:
    names: set[str] = set()
    for module in STORE_MODULES:
        names |= _private_names((PACKAGE / module).read_text(encoding="utf-8"))
    return names


def test_the_scan_knows_the_stores_private_parts() -> None:
    names = _store_private_names()
    assert {"_sql", "_register_in", "_emit_registered", "_execute", "_single", "_array"} <= names


def test_the_scan_finds_a_private_use() -> None:
    source = "def f(store):\n    with store._sql.transaction() as tx:\n        store._register_in(tx, [])\n"
    assert sorted(_uses(source, _store_private_names())) == ["line 2: store._sql", "line 3: store._register_in"]


def test_no_module_outside_the_store_uses_its_private_parts() -> None:
    names = _store_private_names()
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "store":
            continue
        found = _uses(path.read_text(encoding="utf-8"), names)
        if found:
            offenders[str(path.relative_to(PACKAGE))] = found
    assert offenders == {}, f"use the store's unit of work (StateStore.transaction/run/rows/one): {offenders}"
