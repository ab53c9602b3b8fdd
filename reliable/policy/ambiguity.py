"""Policies that would retry a non-idempotent job after an ambiguous error: `reliable policy check` warns.

An ambiguous error is one after which the request may have reached the other side: the exceptions
of the built-in rule `ambiguous-after-send` (read timeouts, resets after sending...). A job that is
not idempotent must not be retried after one: the side effect may already have happened. Pure: the
caller imports the exception classes and passes instances (`probes`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .defaults import AMBIGUOUS_RULE, BUILTIN_PATH, DEFAULT_POLICY
from .engine import Policy
from .matching import Rule, normalize_exception_path

__all__ = ["AmbiguityWarning", "DeclaredActor", "Scope", "ambiguous_exception_paths", "ambiguous_retries",
           "non_idempotent_scopes"]


@dataclass(frozen=True)
class DeclaredActor:
    """An actor as its code declares it: name, queue and options (from an app's broker)."""

    name: str
    queue: str
    options: Mapping[str, Any] = field(default_factory=dict)
    where: str = ""


@dataclass(frozen=True)
class Scope:
    """Jobs the policy (or the code) declares not idempotent: what to call them and where that is said."""

    label: str
    where: str
    actor: str
    queue: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AmbiguityWarning:
    """One warning: where the retrying rule (or key) is, and what it does to which jobs."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: warning: {self.message}"


def ambiguous_exception_paths() -> tuple[str, ...]:
    """The exception paths of the built-in rule `ambiguous-after-send` (the one list of ambiguous errors)."""
    rule = next(r for r in DEFAULT_POLICY["rules"] if r["name"] == AMBIGUOUS_RULE)
    return tuple(normalize_exception_path(path) for path in rule["exception"])


def non_idempotent_scopes(policy: Policy, actors: Iterable[DeclaredActor] = ()) -> list[Scope]:
    """Where the policy or the code makes jobs non-idempotent: `defaults`, queue and actor sections, actors."""
    spec = policy.spec
    scopes: list[Scope] = []
    if not policy.contract("", "").idempotent:
        scopes.append(Scope("every job (defaults)", spec.origins.get("defaults.idempotent", BUILTIN_PATH), "", ""))
    for kind, sections in (("queue", spec.queues), ("actor", spec.actors)):
        for name, section in sections.items():
            actor, queue = (name, "") if kind == "actor" else ("", name)
            declares = "idempotent" in section.overrides or bool(section.rules)
            if declares and not policy.contract(actor, queue).idempotent:
                scopes.append(Scope(f"{kind} {name!r}", section.source, actor, queue))
    for declared in actors:
        if not policy.contract(declared.name, declared.queue, declared.options).idempotent:
            scopes.append(Scope(f"actor {declared.name!r} (queue {declared.queue!r})",
                                declared.where or declared.name, declared.name, declared.queue, declared.options))
    return scopes


def ambiguous_retries(policy: Policy, probes: Mapping[str, BaseException],
                      scopes: Sequence[Scope]) -> list[AmbiguityWarning]:
    """A warning for each rule (or default class) that retries an ambiguous error for a non-idempotent scope."""
    warnings: list[AmbiguityWarning] = []
    for scope in scopes:
        contract = policy.contract(scope.actor, scope.queue, scope.options)
        retried: dict[Rule | None, list[str]] = {}
        for path, exc in probes.items():
            error_class, rule, _ = policy.classify(exc, scope.actor, scope.queue, contract)
            spec = policy.classes.get(error_class)
            if spec is not None and spec.action == "retry":
                retried.setdefault(rule, []).append(path.removeprefix("builtins."))
        for rule, paths in retried.items():
            warnings.append(_warning(policy, scope, rule, paths, contract.fallback_class))
    return warnings


def _warning(policy: Policy, scope: Scope, rule: Rule | None, paths: list[str], fallback: str) -> AmbiguityWarning:
    spec, origins = policy.spec, policy.spec.origins
    errors = ", ".join(paths)
    jobs = f"{scope.label}, which is not idempotent ({scope.where})"
    why = "the request may already have been sent, so a retry can repeat its side effect"
    if rule is None:
        where = origins.get("defaults.default_class", scope.where)
        for section in (spec.actors.get(scope.actor), spec.queues.get(scope.queue)):  # actor keys win
            if section is not None and "default_class" in section.overrides:
                where = section.source
                break
        return AmbiguityWarning(where, f"no rule classifies {errors} for {jobs} and its default_class {fallback!r} "
                                       f"retries: {why}; set default_class: side_effect_unknown or add a rule")
    if rule.path == BUILTIN_PATH:
        where = origins.get(f"classes.{rule.error_class}", BUILTIN_PATH)
        return AmbiguityWarning(where, f"class {rule.error_class!r} now retries, and the built-in rule {rule.name!r} "
                                       f"gives it to {errors} for {jobs}: {why}")
    return AmbiguityWarning(rule.source, f"rule {rule.name!r} (class {rule.error_class}) retries {errors} for {jobs}: "
                                         f"{why}; add `idempotent: true` to the rule, or classify them as "
                                         "side_effect_unknown for these jobs")
