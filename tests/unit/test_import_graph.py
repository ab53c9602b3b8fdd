"""The package's import graph: no cycle, no private name across packages, dependencies pointing inward.

Walks every module of `reliable/` with `ast` (nothing is imported), counting every import that runs:
module-level and inside functions; only imports under `if TYPE_CHECKING:` are left out (they never
run, and a type-only reference is not a dependency). See docs/architecture.md for the layers.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "reliable"

#: Private attributes read across an object boundary on purpose, each with its reason. Anything
#: else spelled `obj._name` (obj not self, cls or super()) is a private part of another module.
PRIVATE_ATTRIBUTES_ALLOWED = {
    "os._exit": "a forked child ends without running the parent's atexit handlers",
    "column._cells": "rich's Column keeps its cells private; the table width is measured from them",
    "self.engine.pool._invalidate": "SQLAlchemy's pool: drop a connection known dead (store/sqlrunner.py)",
    "message._message": "Dramatiq's MessageProxy holds the decoded message privately; a refused delivery whose body "
                        "names another queue is pointed back at the queue it came from (worker/consumed.py)",
    "message._tag": "Dramatiq's RabbitMQ delivery keeps its delivery tag privately; held acknowledgements are sent "
                    "together by tag (rabbitmq/acks.py)",
    "channel._impl": "pika's BlockingChannel.basic_ack is `_impl.basic_ack` then `_flush_output`: the held "
                     "acknowledgements queue their frames with the first and write them once (rabbitmq/acks.py)",
    "channel._flush_output": "see channel._impl (rabbitmq/acks.py)",
}

#: Who may not import whom: a package (or module) and the parts of reliable it must never import.
#: The store is the core: the worker, CLI, web and features sit on it, never the reverse.
FORBIDDEN = {
    "reliable.store": ("reliable.worker", "reliable.middleware", "reliable.cli", "reliable.web",
                       "reliable.control", "reliable.recovery", "reliable.supervisor", "reliable.rabbitmq",
                       "reliable.schedules", "reliable.limits", "reliable.alerts", "reliable.exporter",
                       "reliable.workflows.engine", "reliable.operations"),
    "reliable.policy": ("reliable.worker", "reliable.middleware", "reliable.store", "reliable.cli",
                        "reliable.web", "reliable.control"),
    "reliable.worker": ("reliable.cli", "reliable.web", "reliable.control", "reliable.operations"),
    "reliable.control": ("reliable.cli", "reliable.web", "reliable.worker", "reliable.middleware"),
    "reliable.alerts": ("reliable.cli", "reliable.web", "reliable.worker", "reliable.middleware", "reliable.control"),
    "reliable.web": ("reliable.cli", "reliable.worker", "reliable.middleware"),
    "reliable.supervisor": ("reliable.store", "reliable.worker", "reliable.middleware", "reliable.cli"),
}


@dataclass(frozen=True)
class Import:
    """One import statement's target, as seen in `module` at `line`."""

    module: str
    target: str
    names: tuple[str, ...]
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE_ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(inner) for inner in ast.walk(child))
    return skipped


def _imports(path: Path) -> Iterator[Import]:
    module = _module_name(path)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    skipped = _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "reliable":
                    yield Import(module, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if (node.module or "").split(".")[0] != "reliable":
                    continue
                target = node.module or ""
            else:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            yield Import(module, target, tuple(alias.name for alias in node.names), node.lineno)


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the package by dotted name."""
    return {_module_name(path): path for path in sorted(PACKAGE_ROOT.rglob("*.py"))}


@functools.cache
def all_imports() -> tuple[Import, ...]:
    """Every import of reliable's own modules, in every module."""
    return tuple(found for path in modules().values() for found in _imports(path))


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of reliable it imports (a `from pkg import submodule` counts as the submodule)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for found in all_imports():
        targets = {f"{found.target}.{name}" for name in found.names} & known.keys() or {found.target}
        graph[found.module].update(t for t in targets if t in known and t != found.module)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found, key=len, reverse=True)


def _package_of(module: str) -> str:
    path = modules()[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def test_the_package_is_found() -> None:
    assert len(modules()) > 100 and "reliable.states" in modules()


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles (break each by moving the shared piece below both):\n" + "\n".join(
        " -> ".join(component) for component in found)


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = import_graph()
    graph["reliable.states"] = graph["reliable.states"] | {"reliable.store.store"}
    assert any("reliable.states" in component for component in cycles(graph))


def test_no_private_name_imported_across_packages() -> None:
    offenders = [
        f"{found.module}:{found.line} imports {name} from {found.target}"
        for found in all_imports()
        for name in found.names
        if name.startswith("_") and not name.startswith("__")
        and found.target in modules() and _package_of(found.target) != _package_of(found.module)
    ]
    assert not offenders, "private names used outside their package:\n" + "\n".join(offenders)


def test_no_private_attribute_of_another_object() -> None:
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
                continue
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
                continue
            spelled = ast.unparse(node)
            if spelled not in PRIVATE_ATTRIBUTES_ALLOWED:
                offenders.append(f"{name}:{node.lineno} {spelled}")
    assert not offenders, "private attributes of another object (add a public name):\n" + "\n".join(offenders)


#: The pure core: these import only the listed modules of reliable (the errors are the leaf of everything).
ONLY = {
    "reliable.states": ("reliable.errors",),
    "reliable.durations": ("reliable.errors",),
    "reliable.yamlfile": ("reliable.errors",),
}


@pytest.mark.parametrize("layer", sorted(ONLY))
def test_the_pure_core_imports_almost_nothing(layer: str) -> None:
    offenders = [f"{found.module}:{found.line} imports {found.target}" for found in all_imports()
                 if found.module == layer and found.target not in ONLY[layer]]
    assert not offenders, f"{layer} may import only {', '.join(ONLY[layer])}:\n" + "\n".join(offenders)


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_dependencies_point_inward(layer: str) -> None:
    offenders = [
        f"{found.module}:{found.line} imports {found.target}"
        for found in all_imports()
        if (found.module == layer or found.module.startswith(layer + "."))
        and any(found.target == banned or found.target.startswith(banned.rstrip(".") + ".")
                for banned in FORBIDDEN[layer])
    ]
    assert not offenders, f"{layer} must not import these:\n" + "\n".join(offenders)
