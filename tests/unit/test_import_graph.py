"""The package's import graph and its rules, derived from the one layer table docs/architecture.md renders.

Every rule comes from `LAYERS` in docs/gen_architecture.py (the page embeds what it prints):
- a part imports only parts of its own layer or below, minus its `never` (or only its `only`);
- no cycle between modules, nor between parts (a package counts as one part);
- SQL text (outside docstrings) and `sqlalchemy` imports only in the parts marked `sql` (the store),
  `sqlalchemy` imports also in those marked `sqlalchemy`;
- a private attribute of another object (`obj._name`, or `getattr(obj, "_name")` and its kin), or
  a private name imported from a third-party module, only in the parts marked `private`
  (reliable/compat/, each behind a version gate), bar `STDLIB_PRIVATE_ALLOWED`;
- no private name of reliable imported from another of its packages; every module placed.

Modules are read with `ast` (nothing is imported). Every import that runs counts: module-level and
inside functions; only imports under `if TYPE_CHECKING:` are left out (they never run, and a
type-only reference is not a dependency). Each checker is also run on small synthetic sources that
break its rule (`test_the_checkers_catch_*`), so a checker that catches nothing fails too.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from support import docs_script

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = ROOT / "reliable"


def _layer_table() -> ModuleType:
    return docs_script("gen_architecture")


TABLE = _layer_table()

#: Private names of the standard library used on purpose anywhere, each with its reason.
STDLIB_PRIVATE_ALLOWED = {
    "os._exit": "a forked child ends without running the parent's atexit handlers (documented API)",
}
#: SQL in a string: statements and the clauses only SQL has, in capitals (as reliable writes SQL:
#: prose may say "select ... from"), and any case of a clause naming one of reliable's tables.
SQL = re.compile(r"\b(SELECT\b[^;]{0,200}?\bFROM\b|INSERT\s+INTO|UPDATE\s+\w+\s+SET\b|DELETE\s+FROM"
                 r"|CREATE\s+(TABLE|INDEX|UNIQUE\s+INDEX|DATABASE)|ALTER\s+TABLE|DROP\s+(TABLE|INDEX)"
                 r"|FOR\s+UPDATE\b|RETURNING\s+\*)|(?i:\b(from|join|into|update)\s+reliable_\w+)")
_PRIVATE = re.compile(r"_[^_]")  # `_name`, not `__dunder__`
#: Functions given an object and an attribute's name, and `operator.attrgetter` (given names only).
_ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "hasattr", "delattr"}


@dataclass(frozen=True)
class Module:
    """One module's source: its dotted name and whether it is a package's `__init__.py`."""

    name: str
    text: str
    package: bool

    @classmethod
    def at(cls, relative: str, text: str) -> Module:
        """The module at `relative` (a path under reliable/, e.g. "worker/claim.py")."""
        parts = ["reliable", *Path(relative).with_suffix("").parts]
        package = parts[-1] == "__init__"
        return cls(".".join(parts[:-1] if package else parts), text, package)

    @functools.cached_property
    def tree(self) -> ast.Module:
        """Its syntax tree."""
        return ast.parse(self.text, filename=self.name)

    @functools.cached_property
    def imports(self) -> tuple[Import, ...]:
        """Every import that runs in it (`imports_of`)."""
        return tuple(imports_of(self))


@dataclass(frozen=True)
class Import:
    """One import statement's target, as seen in `module` at `line`."""

    module: str
    target: str
    names: tuple[str, ...]
    line: int


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skipped.update(id(inner) for inner in ast.walk(child))
    return skipped


def imports_of(module: Module) -> Iterator[Import]:
    """Every import that runs in `module`, of any package (relative imports resolved)."""
    skipped = _type_checking_nodes(module.tree)
    for node in ast.walk(module.tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module.name, alias.name, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                target = node.module or ""
            else:
                base = module.name.split(".") if module.package else module.name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            yield Import(module.name, target, tuple(alias.name for alias in node.names), node.lineno)


def _ours(target: str) -> bool:
    return target.split(".")[0] == "reliable"


def _read_tree() -> dict[str, Module]:
    found = (Module.at(str(path.relative_to(PACKAGE_ROOT)), path.read_text(encoding="utf-8"))
             for path in sorted(PACKAGE_ROOT.rglob("*.py")))
    return {module.name: module for module in found}


@functools.cache
def tree_modules() -> dict[str, Module]:
    """Every module of the package by dotted name."""
    return _read_tree()


def _targets(found: Import, modules: Mapping[str, Module]) -> set[str]:
    """What an import of reliable loads: `from pkg import submodule` counts as the submodule."""
    return {f"{found.target}.{name}" for name in found.names} & modules.keys() or {found.target}


def import_graph(modules: Mapping[str, Module]) -> dict[str, set[str]]:
    """module -> the modules of reliable (among `modules`) it imports."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for module in modules.values():
        for found in module.imports:
            if _ours(found.target):
                graph[module.name].update(t for t in _targets(found, modules) if t in modules and t != module.name)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph.get(node, ())):
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


# -- the layer table ---------------------------------------------------------------------------

@functools.cache
def _placements() -> tuple[tuple[str, str], ...]:
    """(dotted name, part path), longest name first: the first that contains a module places it."""
    return tuple(sorted(((TABLE.module_of(path), path) for path in TABLE.parts()), key=lambda p: -len(p[0])))


@functools.cache
def part_of(module: str) -> str | None:
    """The path of the part of the table that holds `module`, None when no part does."""
    for name, path in _placements():
        if module == name or (path.endswith("/") and module.startswith(name + ".")):
            return str(path)
    return None


def _layer(path: str) -> int:
    return int(TABLE.parts()[path][0].number)


def _rule(path: str) -> Any:
    return TABLE.parts()[path][1]


def unplaced(modules: Mapping[str, Module]) -> list[str]:
    """The modules no part of the table holds."""
    return [name for name in modules if part_of(name) is None]


def layer_offences(modules: Mapping[str, Module]) -> list[str]:
    """Every import of a part above the importer's layer, in its `never`, or outside its `only`."""
    offences = []
    for module in modules.values():
        source = part_of(module.name)
        if source is None:
            continue
        rule = _rule(source)
        for found in module.imports:
            if not _ours(found.target):
                continue
            for target in sorted(_targets(found, modules)):
                into = part_of(target)
                if into is None or into == source:
                    continue
                why = []
                if _layer(into) > _layer(source):
                    why.append(f"layer {_layer(source)} imports layer {_layer(into)}")
                if into in rule.never:
                    why.append(f"{source} never imports {into}")
                if rule.only is not None and into not in rule.only:
                    why.append(f"{source} imports only {', '.join(rule.only) or 'nothing of reliable'}")
                if why:
                    offences.append(f"{module.name}:{found.line} imports {target}: {'; '.join(why)}")
    return offences


def part_cycles(modules: Mapping[str, Module]) -> list[list[str]]:
    """Cycles between parts (a package is one node): the package-level cycles."""
    graph: dict[str, set[str]] = {}
    for name, targets in import_graph(modules).items():
        source = part_of(name)
        if source is None:
            continue
        graph.setdefault(source, set()).update(p for t in targets if (p := part_of(t)) not in (None, source))
    return cycles(graph)


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def sql_offences(modules: Mapping[str, Module]) -> list[str]:
    """SQL text outside docstrings, and `sqlalchemy` imports, in a part not allowed them."""
    offences = []
    for module in modules.values():
        path = part_of(module.name)
        if path is None:
            continue
        rule = _rule(path)
        if rule.sql:
            continue
        if not rule.sqlalchemy:
            offences += [f"{module.name}:{found.line} imports {found.target}" for found in module.imports
                         if found.target.split(".")[0] == "sqlalchemy"]
        docstrings = _docstrings(module.tree)
        for node in ast.walk(module.tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                    and (match := SQL.search(node.value))):
                offences.append(f"{module.name}:{node.lineno} writes SQL: {match.group(0)!r}")
    return offences


def _is_own(owner: ast.expr) -> bool:
    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
        return True
    return isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super"


def _names_a_private_attribute(call: ast.Call) -> bool:
    """`getattr(obj, "_name")` and its kin (obj not self, cls or super()), or `attrgetter("_name")`."""
    name = call.func.id if isinstance(call.func, ast.Name) else call.func.attr if isinstance(
        call.func, ast.Attribute) else ""
    if name == "attrgetter":
        named = call.args
    elif name in _ATTRIBUTE_FUNCTIONS and len(call.args) >= 2 and not _is_own(call.args[0]):
        named = [call.args[1]]
    else:
        return False
    return any(isinstance(arg, ast.Constant) and isinstance(arg.value, str)
               and any(_PRIVATE.match(piece) for piece in arg.value.split(".")) for arg in named)


def private_offences(modules: Mapping[str, Module]) -> list[str]:
    """Private attributes of another object (spelled, or named to getattr and its kin) and private
    names imported from third-party modules, in a part not marked `private`."""
    offences = []
    for module in modules.values():
        path = part_of(module.name)
        if path is None or _rule(path).private:
            continue
        for node in ast.walk(module.tree):
            if isinstance(node, ast.Attribute) and _PRIVATE.match(node.attr) and not _is_own(node.value):
                spelled = ast.unparse(node)
                if spelled not in STDLIB_PRIVATE_ALLOWED:
                    offences.append(f"{module.name}:{node.lineno} {spelled}")
            elif isinstance(node, ast.Call) and _names_a_private_attribute(node):
                offences.append(f"{module.name}:{node.lineno} {ast.unparse(node)}")
        for found in module.imports:
            if _ours(found.target):
                continue
            named = [found.target, *found.names] if found.names else found.target.split(".")[1:]
            offences += [f"{module.name}:{found.line} imports {name} from {found.target}"
                         for name in named if any(_PRIVATE.match(piece) for piece in name.split("."))]
    return offences


def _package_of(modules: Mapping[str, Module], name: str) -> str:
    return name if modules[name].package else name.rpartition(".")[0]


def private_names_across_packages(modules: Mapping[str, Module]) -> list[str]:
    """Private names of reliable imported from another of its packages."""
    return [
        f"{found.module}:{found.line} imports {name} from {found.target}"
        for module in modules.values()
        for found in module.imports
        if _ours(found.target) and found.target in modules
        for name in found.names
        if _PRIVATE.match(name) and _package_of(modules, found.target) != _package_of(modules, found.module)
    ]


# -- the rules on the package ------------------------------------------------------------------

def test_the_package_is_found() -> None:
    assert len(tree_modules()) > 100 and "reliable.states" in tree_modules()


def test_every_module_is_placed_in_the_layer_table() -> None:
    assert not unplaced(tree_modules()), "add these to LAYERS in docs/gen_architecture.py:\n" + "\n".join(
        unplaced(tree_modules()))


def test_every_part_of_the_layer_table_exists() -> None:
    missing = [path for path in TABLE.parts() if not (PACKAGE_ROOT / path).exists()]
    assert not missing, f"LAYERS names parts that are gone: {missing}"


def test_dependencies_point_down_the_layers() -> None:
    offences = layer_offences(tree_modules())
    assert not offences, "imports against the layers (docs/architecture.md):\n" + "\n".join(offences)


def test_no_import_cycle() -> None:
    found = cycles(import_graph(tree_modules()))
    assert not found, "import cycles (break each by moving the shared piece below both):\n" + "\n".join(
        " -> ".join(component) for component in found)


def test_no_cycle_between_packages() -> None:
    found = part_cycles(tree_modules())
    assert not found, "cycles between parts (move what closes each to the layer below):\n" + "\n".join(
        " <-> ".join(component) for component in found)


def test_sql_only_in_the_store() -> None:
    offences = sql_offences(tree_modules())
    assert not offences, "SQL text or sqlalchemy outside the store (add a typed query to store/):\n" + "\n".join(
        offences)


def test_third_party_private_parts_only_in_compat() -> None:
    offences = private_offences(tree_modules())
    assert not offences, ("private parts of another object or library (add a public name, or a gated "
                          "function to reliable/compat/):\n" + "\n".join(offences))


def test_no_private_name_imported_across_packages() -> None:
    offences = private_names_across_packages(tree_modules())
    assert not offences, "private names used outside their package:\n" + "\n".join(offences)


# -- each checker catches what it is for: small sources that break one rule each -----------------

def _synthetic(**sources: str) -> dict[str, Module]:
    """Modules from sources keyed by path under reliable/, "/" spelled "__" and ".py" left out:
    `worker__claim="..."` is reliable/worker/claim.py (its packages are added, empty)."""
    found = (Module.at(key.replace("__", "/") + ".py", text) for key, text in sources.items())
    modules = {module.name: module for module in found}
    for name in list(modules):  # each package of a synthetic module exists
        while "." in (name := name.rpartition(".")[0]):
            modules.setdefault(name, Module(name, "", True))
    return modules


@pytest.mark.parametrize(("sources", "caught"), [
    pytest.param({"limits__gate": "from ..operations import Operations\n"}, "layer 3 imports layer 5",
                 id="a feature imports operations"),
    pytest.param({"schedules__boot": "def f():\n    from reliable.cli import main\n"}, "layer 3 imports layer 6",
                 id="a feature imports the cli (in a function)"),
    pytest.param({"alerts__engine": "from ..web import app\n"}, "layer 3 imports layer 6",
                 id="a feature imports web"),
    pytest.param({"recovery": "from .worker.claim import claim\n"}, "layer 3 imports layer 4",
                 id="recovery imports a worker step"),
    pytest.param({"store__x": "from ..control import Control\n"}, "layer 2 imports layer 5",
                 id="the store imports control"),
    pytest.param({"web__api": "from ..cli import main\n"}, "web/ never imports cli/",
                 id="web imports the cli (same layer)"),
    pytest.param({"control": "from .worker import claim\n"}, "control.py never imports worker/",
                 id="control imports the worker (a layer below)"),
    pytest.param({"states": "from .store import StateStore\n"}, "states.py imports only errors.py",
                 id="the pure core imports the store"),
])
def test_the_checkers_catch_an_import_against_the_layers(sources: dict[str, str], caught: str) -> None:
    offences = layer_offences(_synthetic(**sources))
    assert any(caught in offence for offence in offences), offences


def test_the_checkers_let_an_import_down_the_layers_pass() -> None:
    allowed = _synthetic(worker__claim="from ..recovery import Recovery\nfrom ..store import StateStore\n",
                         cli__main="from ..control import Control\n",
                         states="from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .store import X\n")
    assert layer_offences(allowed) == []


def test_the_checkers_catch_a_cycle_between_packages() -> None:
    modules = _synthetic(recovery="from .workflows import engine\n", workflows__engine="from ..rabbitmq import acks\n",
                         rabbitmq__acks="from ..recovery import Recovery\n")
    assert part_cycles(modules) == [["rabbitmq/", "recovery.py", "workflows/"]]
    assert cycles(import_graph(modules)) == [["reliable.rabbitmq.acks", "reliable.recovery",
                                              "reliable.workflows.engine"]]


@pytest.mark.parametrize(("source", "caught"), [
    pytest.param('def f(unit):\n    unit.execute("UPDATE reliable_jobs SET status = :s")\n', "writes SQL",
                 id="an UPDATE"),
    pytest.param('Q = f"SELECT job_id FROM {table} WHERE status = 1"\n', "writes SQL", id="a SELECT in an f-string"),
    pytest.param('Q = """\n    insert into reliable_jobs (job_id) values (1)\n"""\n', "writes SQL",
                 id="a lower-case INSERT"),
    pytest.param('Q = "... FOR UPDATE"\n', "writes SQL", id="a row lock"),
    pytest.param("from sqlalchemy import text\n", "imports sqlalchemy", id="a sqlalchemy import"),
    pytest.param("def f():\n    import sqlalchemy.engine\n", "imports sqlalchemy.engine",
                 id="a sqlalchemy import in a function"),
])
def test_the_checkers_catch_sql_outside_the_store(source: str, caught: str) -> None:
    offences = sql_offences(_synthetic(control=source))
    assert any(caught in offence for offence in offences), offences
    assert sql_offences(_synthetic(store__anything=source)) == []


def test_the_checkers_let_sql_words_in_docstrings_and_prose_pass() -> None:
    prose = '"""Runs SELECT ... FROM reliable_jobs, documented."""\nHELP = "select the jobs to requeue from a list"\n'
    assert sql_offences(_synthetic(control=prose)) == []


@pytest.mark.parametrize(("source", "caught"), [
    pytest.param("def f(message):\n    return message._message\n", "message._message", id="an attribute"),
    pytest.param('def f(message):\n    return getattr(message, "_message", None)\n',
                 "getattr(message, '_message', None)", id="getattr"),
    pytest.param('def f(values):\n    return hasattr(values.ValueClass, "_multiprocess")\n', "hasattr",
                 id="hasattr"),
    pytest.param('def f(m, q):\n    setattr(m, "_message", q)\n', "setattr", id="setattr"),
    pytest.param('import operator\nKEY = operator.attrgetter("priority", "_queued_time")\n', "attrgetter",
                 id="attrgetter"),
    pytest.param("from dramatiq.brokers.rabbitmq import _RabbitmqConsumer\n", "imports _RabbitmqConsumer",
                 id="a private name imported"),
    pytest.param("import pika._private\n", "imports _private", id="a private module imported"),
])
def test_the_checkers_catch_private_parts_outside_compat(source: str, caught: str) -> None:
    offences = private_offences(_synthetic(worker__claim=source))
    assert any(caught in offence for offence in offences), offences
    assert private_offences(_synthetic(compat__anything=source)) == []


def test_the_checkers_let_own_and_public_attributes_pass() -> None:
    own = ('class A:\n    def f(self):\n        return self._x, getattr(self, "_y", None), super()._z, '
           'getattr(self, "__dict__")\n'
           'import os\ndef g(o):\n    os._exit(0)\n    return getattr(o, "name"), o.__class__\n')
    assert private_offences(_synthetic(worker__claim=own)) == []


def test_the_checkers_catch_a_private_name_imported_across_packages() -> None:
    modules = _synthetic(worker__context="_current = 1\n", workflows__engine="from ..worker.context import _current\n",
                         worker__claim="from .context import _current\n")
    assert private_names_across_packages(modules) == [
        "reliable.workflows.engine:1 imports _current from reliable.worker.context"]


def test_the_checkers_catch_an_unplaced_module() -> None:
    assert unplaced(_synthetic(somewhere_new="", worker__claim="")) == ["reliable.somewhere_new"]
