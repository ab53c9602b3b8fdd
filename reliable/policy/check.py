"""`reliable policy check`: strict validation, including that every exception path can be imported.

Importing is what makes `check` stricter than `Policy.load`: at run time rules match by name and
nothing is imported; here a path whose module cannot be imported, or that names no exception
class, is an error, and subclass relationships learnt from the imports also reveal shadowed rules.
With an app, a section naming an actor or queue it does not declare is an error
(`reliable.policy.names`). A valid policy may still get warnings: a rule that would retry a non-idempotent job after an
ambiguous error (see `reliable.policy.ambiguity`).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import PolicyError
from .ambiguity import (
    AmbiguityWarning,
    DeclaredActor,
    ambiguous_exception_paths,
    ambiguous_retries,
    non_idempotent_scopes,
)
from .defaults import BUILTIN_PATH, layered
from .engine import Policy
from .matching import Rule
from .names import undeclared_names
from .schema import Problem, build_spec, collect_rules
from .source import Document, policy_files, read_document

__all__ = ["CheckResult", "check_path", "resolve_exception"]


@dataclass(frozen=True)
class CheckResult:
    """What `check_path` found: the problems (empty when valid) and, when valid, the policy.

    `rules` counts the user's rules, `builtin_rules` the built-in ones in use (0 when a file says
    `inherit: false`); `warnings` do not make the policy invalid.
    """

    problems: tuple[Problem, ...]
    policy: Policy | None
    rules: int
    actors: int
    queues: int
    builtin_rules: int = 0
    inherits: bool = True
    warnings: tuple[AmbiguityWarning, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the policy is valid."""
        return not self.problems


def resolve_exception(path: str) -> type[BaseException]:
    """Import the exception class at a dotted `path` (the longest importable module prefix, then attributes).

    Raises ValueError saying what could not be imported.
    """
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj: object = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            missing = exc.name or ""
            if module_name == missing or module_name.startswith(missing + "."):
                continue  # that module does not exist: try a shorter prefix
            raise ValueError(f"importing module {module_name!r} failed: {exc}") from None
        except Exception as exc:
            raise ValueError(f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}") from None
        for attr in parts[split:]:
            if not hasattr(obj, attr):
                raise ValueError(f"module {module_name!r} has no attribute {'.'.join(parts[split:])!r}")
            obj = getattr(obj, attr)
        if not (isinstance(obj, type) and issubclass(obj, BaseException)):
            raise ValueError(f"{path!r} is not an exception class")
        return obj
    raise ValueError(f"cannot import module {'.'.join(parts[:-1]) or parts[0]!r} for exception {path!r} "
                     "(is it installed, and is the current directory on the import path?)")


def _import_problems(rules: list[Rule]) -> tuple[list[Problem], dict[tuple[str, str], bool]]:
    problems: list[Problem] = []
    resolved: dict[str, type[BaseException]] = {}
    for rule in rules:
        for path in rule.exceptions:
            if path in resolved:
                continue
            try:
                resolved[path] = resolve_exception(path)
            except ValueError as exc:
                problems.append(Problem(rule.path or "<policy>", rule.exception_line or rule.line,
                                        f"rule {rule.name!r} exception", f"unknown exception path: {exc}"))
    subclass = {(child, parent): issubclass(child_cls, parent_cls)
                for child, child_cls in resolved.items() for parent, parent_cls in resolved.items() if child != parent}
    return problems, subclass


def check_path(path: str | os.PathLike[str] | None, *, actors: Sequence[DeclaredActor] = (),
               queues: Sequence[str] = ()) -> CheckResult:
    """Validate the policy file or directory at `path` (None: the built-in policy) strictly.

    Every problem, in file order; with an app's `actors` (and the other `queues` its broker
    declares), an `actors:` or `queues:` section naming none of them is a problem too
    (`reliable.policy.names`). For a valid policy, warnings for rules that would retry the
    non-idempotent jobs it declares (and those of `actors`, as their code declares them) after an
    ambiguous error.
    """
    problems: list[Problem] = []
    documents: list[Document] = []
    try:
        files = [] if path is None else policy_files(path)
    except PolicyError as exc:
        return CheckResult((_from_error(exc),), None, 0, 0, 0)
    for file in files:
        try:
            documents.append(read_document(file))
        except PolicyError as exc:
            problems.append(_from_error(exc))
    documents = layered(documents)
    import_problems, subclass = _import_problems(collect_rules(documents))
    spec, spec_problems = build_spec(documents, subclass=subclass)
    problems.extend(spec_problems)
    problems.extend(import_problems)
    order = {str(file): index for index, file in enumerate(files)}
    problems.sort(key=lambda p: (order.get(p.path, len(order)), p.line or 0))
    if problems or spec is None:
        return CheckResult(tuple(problems), None, 0, 0, 0)
    policy = Policy(spec)
    scopes = [rule for _, rule in spec.all_rules()]
    builtin = sum(1 for rule in scopes if rule.path == BUILTIN_PATH)
    if actors:  # an app was given: its sections must name what it declares (reliable.policy.names)
        names = undeclared_names(policy, [a.name for a in actors], [a.queue for a in actors] + list(queues))
        if names:
            return CheckResult(tuple(Problem(n.path, n.line, f"{n.kind}.{n.name}", n.message) for n in names),
                               None, 0, 0, 0)
    warnings = ambiguous_retries(policy, _probes(), non_idempotent_scopes(policy, actors))
    return CheckResult((), policy, len(scopes) - builtin, len(spec.actors), len(spec.queues), builtin_rules=builtin,
                       inherits=spec.inherits, warnings=tuple(warnings))


def _probes() -> dict[str, BaseException]:
    """An instance of each ambiguous exception class (made without calling its __init__: no arguments needed)."""
    probes: dict[str, BaseException] = {}
    for path in ambiguous_exception_paths():
        cls = resolve_exception(path)
        probes[path] = cls.__new__(cls)
    return probes


def _from_error(exc: PolicyError) -> Problem:
    message = str(exc)
    prefix = f"{exc.path or '<policy>'}" + (f":{exc.line}" if exc.line is not None else "") + ": "
    message = message.removeprefix(prefix)
    if exc.field:
        message = message.removesuffix(f" (field: {exc.field})")
    return Problem(exc.path or "<policy>", exc.line, exc.field or "", message)
