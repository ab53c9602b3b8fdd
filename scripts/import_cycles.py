"""Print the import cycles among reliable's modules; exit 1 when there is one.

Every `import` and `from ... import` counts, at module level, inside functions and under
TYPE_CHECKING alike: a lazy import hides a cycle from the interpreter, not from the design.
`from pkg import name` counts as an import of `pkg.name` when that is a module, else of `pkg`.

    python scripts/import_cycles.py [ROOT] [--edges] [--without reliable.middleware ...]

`--without MODULE` drops a module from the graph (to see which cycles close through it).
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path


def module_graph(root: Path) -> dict[str, set[str]]:
    """Module name -> the modules of the same package tree it imports."""
    files: dict[str, tuple[Path, list[str]]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        package = parts[:-1]
        if parts[-1] == "__init__":
            parts = package = parts[:-1]
        files[".".join(parts)] = (path, package)
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, (path, package) in files.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                submodules = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in files]
                targets = submodules + ([base] if len(submodules) < len(node.names) else [])
            graph[name].update(t for t in targets if t in files and t != name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, largest first (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found, key=lambda c: (-len(c), c))


def main() -> int:
    """Print the cycles (and with --edges the imports inside each); 1 when there is one."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1] / "reliable"))
    parser.add_argument("--edges", action="store_true", help="list the imports inside each cycle")
    parser.add_argument("--without", action="append", default=[], metavar="MODULE")
    args = parser.parse_args()
    graph = module_graph(Path(args.root).resolve())
    for dropped in args.without:
        graph.pop(dropped, None)
        for imports in graph.values():
            imports.discard(dropped)
    found = cycles(graph)
    for component in found:
        print(f"{len(component)}: {' '.join(component)}")
        if args.edges:
            for name in component:
                for imported in sorted(graph[name] & set(component)):
                    print(f"    {name} -> {imported}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
