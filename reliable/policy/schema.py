"""Validating policy documents into a PolicySpec. Pure: it works on documents already read.

Every problem names file, line and field and says what was expected. Documents are merged in
order. The built-in document (`Document.builtin`) is a base layer: the user's documents override its
keys, and their rules are tried before its rules. The user's own files may add rules, classes,
queues and actors; a key the user defines in two places is an error naming both.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..durations import parse_duration
from ..errors import HeartbeatTooSlow, PolicyError
from ..patterns import UserPattern, compile_pattern
from ..yamlfile import LocatedMap, LocatedSeq
from .defaults import BUILTIN_PATH
from .fields import CONTRACT_KEYS, NESTED_CONTRACT_KEYS, as_bool, as_int, as_str, choice, class_name, identifier_path
from .matching import Rule, normalize_exception_path, parse_statuses
from .model import ACTIONS, BUILTIN_CLASSES, ClassSpec, LeaseSettings, check_heartbeat
from .routes import queue_name
from .source import Document

__all__ = ["PolicySpec", "Problem", "Section", "build_spec", "collect_rules"]

TOP_KEYS = ("version", "inherit", "lease", "defaults", "classes", "rules", "queues", "actors")
LEASE_KEYS = ("ttl", "heartbeat_interval", "recovery_interval", "sweep_after", "retry_grace")
RULE_KEYS = ("name", "description", "idempotent", "exception", "status", "message", "attribute", "class",
             "queue", "queue_after")
CLASS_KEYS = ("action", "alert", "rate_limited", "description", "queue", "queue_after")
_SCALAR = (str, int, float, bool, type(None))


@dataclass(frozen=True)
class Problem:
    """One thing wrong in a policy file."""

    path: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"

    def error(self) -> PolicyError:
        """The problem as a PolicyError."""
        return PolicyError(self.message, path=self.path, line=self.line, field=self.field or None)


@dataclass(frozen=True)
class Section:
    """A `queues.<name>` or `actors.<name>` section: contract overrides and its own rules."""

    name: str
    overrides: Mapping[str, Any]
    rules: tuple[Rule, ...]
    source: str


@dataclass(frozen=True)
class PolicySpec:
    """A validated, merged policy."""

    lease: LeaseSettings
    defaults: Mapping[str, Any]
    classes: Mapping[str, ClassSpec]
    rules: tuple[Rule, ...]
    queues: Mapping[str, Section]
    actors: Mapping[str, Section]
    sources: tuple[str, ...] = ()
    #: Where each key was set, "path:line" ("defaults.default_class", "classes.transient", "lease.ttl"...).
    origins: Mapping[str, str] = field(default_factory=dict)

    @property
    def inherits(self) -> bool:
        """Whether the built-in policy is part of this one (no file said `inherit: false`)."""
        return BUILTIN_PATH in self.sources

    def all_rules(self) -> Iterator[tuple[str, Rule]]:
        """Every rule with its scope ("global", "queue payments", "actor send")."""
        for name, section in self.actors.items():
            yield from ((f"actor {name}", rule) for rule in section.rules)
        for name, section in self.queues.items():
            yield from ((f"queue {name}", rule) for rule in section.rules)
        yield from (("global", rule) for rule in self.rules)


@dataclass
class _Builder:
    problems: list[Problem] = field(default_factory=list)
    lease: dict[str, float] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    classes: dict[str, ClassSpec] = field(default_factory=dict)
    rules: list[Rule] = field(default_factory=list)
    builtin_rules: list[Rule] = field(default_factory=list)
    queues: dict[str, Section] = field(default_factory=dict)
    actors: dict[str, Section] = field(default_factory=dict)
    origins: dict[str, tuple[str, int]] = field(default_factory=dict)
    builtin_keys: set[str] = field(default_factory=set)
    class_refs: list[tuple[str, str, int, str]] = field(default_factory=list)
    #: Rules that route their retries (`queue:`): (class, path, line, field); their class must retry.
    route_refs: list[tuple[str, str, int, str]] = field(default_factory=list)
    in_builtin: bool = False

    def add(self, path: str, line: int | None, fld: str, message: str) -> None:
        self.problems.append(Problem(path, line, fld, message))

    def claim(self, key: str, path: str, line: int, fld: str) -> bool:
        """Record where `key` is defined; False (and a problem naming both places) if the user already did.

        A key of the built-in document is overridden, not duplicated.
        """
        if key in self.origins and key not in self.builtin_keys:
            first_path, first_line = self.origins[key]
            self.add(path, line, fld, f"defined twice: first at {first_path}:{first_line}, again here (your "
                                      "files extend the built-in policy: set each key once, in one file; "
                                      "a copy of policies/builtin/default.yaml moved into your policy "
                                      "folder loads as one of your files)")
            return False
        self.origins[key] = (path, line)
        if self.in_builtin:
            self.builtin_keys.add(key)
        else:
            self.builtin_keys.discard(key)
        return True

    def mapping(self, value: Any, path: str, line: int, fld: str) -> LocatedMap | None:
        if isinstance(value, LocatedMap):
            return value
        kind = "a list" if isinstance(value, list) else f"{type(value).__name__} {value!r}"
        self.add(path, line, fld, f"expected a mapping, got {kind}")
        return None

    def known_keys(self, m: LocatedMap, allowed: tuple[str, ...], path: str, prefix: str) -> None:
        for key in m:
            if key not in allowed:
                self.add(path, m.key_line(key), f"{prefix}{key}",
                         f"unknown key {key!r}; expected one of: {', '.join(allowed)}")

    def value(self, m: LocatedMap, key: str, check: Any, path: str, fld: str) -> tuple[bool, Any]:
        try:
            return True, check(m[key])
        except ValueError as exc:
            self.add(path, m.key_line(key), fld, str(exc))
            return False, None

    # -- sections -----------------------------------------------------------------------------

    def document(self, doc: Document) -> None:
        root, path = doc.root, doc.path
        self.in_builtin = doc.builtin
        self.known_keys(root, TOP_KEYS, path, "")
        if "version" in root and root["version"] != 1:
            self.add(path, root.key_line("version"), "version", f"expected 1, got {root['version']!r}")
        if "inherit" in root:
            ok, _ = self.value(root, "inherit", as_bool, path, "inherit")
            if ok:
                self.claim("inherit", path, root.key_line("inherit"), "inherit")
        if "lease" in root and (m := self.mapping(root["lease"], path, root.key_line("lease"), "lease")):
            self.lease_section(m, path)
        if "defaults" in root and (m := self.mapping(root["defaults"], path, root.key_line("defaults"), "defaults")):
            for key, value in self.contract(m, path, "defaults", allow_rules=False)[0].items():
                if self.claim(f"defaults.{key}", path, m.key_line(key.split(".")[0]), f"defaults.{key}"):
                    self.defaults[key] = value
        if "classes" in root and (m := self.mapping(root["classes"], path, root.key_line("classes"), "classes")):
            for name in m:
                self.class_section(name, m[name], path, m.key_line(name))
        if "rules" in root:
            target_rules = self.builtin_rules if doc.builtin else self.rules
            target_rules.extend(self.rule_list(root["rules"], path, root.key_line("rules"), "rules"))
        for kind, target in (("queues", self.queues), ("actors", self.actors)):
            if kind in root and (m := self.mapping(root[kind], path, root.key_line(kind), kind)):
                for name in m:
                    line = m.key_line(name)
                    sub = self.mapping(m[name], path, line, f"{kind}.{name}")
                    if sub is None or not self.claim(f"{kind}.{name}", path, line, f"{kind}.{name}"):
                        continue
                    overrides, rules = self.contract(sub, path, f"{kind}.{name}", allow_rules=True)
                    target[name] = Section(name, overrides, tuple(rules), f"{path}:{line}")

    def lease_section(self, m: LocatedMap, path: str) -> None:
        self.known_keys(m, LEASE_KEYS, path, "lease.")
        for key in LEASE_KEYS:
            if key not in m:
                continue
            ok, seconds = self.value(m, key, parse_duration, path, f"lease.{key}")
            if not ok or not self.claim(f"lease.{key}", path, m.key_line(key), f"lease.{key}"):
                continue
            if key != "retry_grace" and seconds <= 0:
                self.add(path, m.key_line(key), f"lease.{key}", "expected a duration more than zero")
                continue
            self.lease[key] = seconds

    def contract(self, m: LocatedMap, path: str, prefix: str, *,
                 allow_rules: bool) -> tuple[dict[str, Any], list[Rule]]:
        allowed = (*CONTRACT_KEYS, *NESTED_CONTRACT_KEYS, *(("rules",) if allow_rules else ()))
        self.known_keys(m, allowed, path, f"{prefix}.")
        out: dict[str, Any] = {}
        rules: list[Rule] = []
        for key in m:
            fld = f"{prefix}.{key}"
            if key in CONTRACT_KEYS:
                ok, value = self.value(m, key, CONTRACT_KEYS[key], path, fld)
                if ok:
                    out[key] = value
                    if key == "default_class" and value is not None:
                        self.class_refs.append((value, path, m.key_line(key), fld))
            elif key == "rules" and allow_rules:
                rules = self.rule_list(m[key], path, m.key_line(key), fld)
            elif key == "retry_budget" and m[key] is None:
                out["retry_budget"] = False
            elif key in NESTED_CONTRACT_KEYS and (sub := self.mapping(m[key], path, m.key_line(key), fld)):
                keys = NESTED_CONTRACT_KEYS[key]
                self.known_keys(sub, tuple(keys), path, f"{fld}.")
                for name in sub:
                    if name in keys:
                        ok, value = self.value(sub, name, keys[name], path, f"{fld}.{name}")
                        if ok:
                            out[f"{key}.{name}"] = value
                if key == "retry_budget":
                    out["retry_budget"] = True
                if key == "backoff" and out.get("backoff.base", 0) > out.get("backoff.cap", float("inf")):
                    self.add(path, sub.key_line("base"), f"{fld}.base", "backoff.base must not exceed backoff.cap")
        return out, rules

    def class_section(self, name: str, value: Any, path: str, line: int) -> None:
        fld = f"classes.{name}"
        try:
            class_name(name)
        except ValueError as exc:
            self.add(path, line, fld, str(exc))
            return
        if name == "crash":
            self.add(path, line, fld, "'crash' is reserved for worker crashes and lease expiries")
            return
        m = self.mapping(value, path, line, fld)
        if m is None or not self.claim(fld, path, line, fld):
            return
        self.known_keys(m, CLASS_KEYS, path, f"{fld}.")
        base = BUILTIN_CLASSES.get(name)
        if "action" not in m and base is None:
            self.add(path, line, f"{fld}.action", f"missing required key 'action' (one of: {', '.join(ACTIONS)})")
            return
        spec: dict[str, Any] = {"action": base.action if base else "retry", "alert": base.alert if base else False,
                "rate_limited": base.rate_limited if base else False, "description": base.description if base else ""}
        for key, check in (("action", choice(*ACTIONS)), ("alert", as_bool), ("rate_limited", as_bool),
                           ("description", as_str), ("queue", queue_name), ("queue_after", as_int(0))):
            if key in m:
                ok, checked = self.value(m, key, check, path, f"{fld}.{key}")
                if ok:
                    spec[key] = checked
        if spec["rate_limited"] and spec["action"] != "retry":
            self.add(path, m.key_line("rate_limited"), f"{fld}.rate_limited", "rate_limited needs action: retry")
        self.route_keys(m, path, fld, retries=spec["action"] == "retry")
        self.classes[name] = ClassSpec(name=name, **spec)

    def rule_list(self, value: Any, path: str, line: int, fld: str) -> list[Rule]:
        if not isinstance(value, LocatedSeq):
            self.add(path, line, fld, f"expected a list of rules, got {type(value).__name__}")
            return []
        rules = []
        for index, item in enumerate(value):
            rule = self.rule(item, path, value.item_lines[index], f"{fld}[{index}]", index)
            if rule is not None:
                rules.append(rule)
        return rules

    def rule(self, m: Any, path: str, line: int, fld: str, index: int) -> Rule | None:
        if not isinstance(m, LocatedMap):
            self.add(path, line, fld, f"expected a rule (a mapping with 'class' and conditions), got {m!r}")
            return None
        before = len(self.problems)
        self.known_keys(m, RULE_KEYS, path, f"{fld}.")
        name = f"rule-{index + 1}"
        if "name" in m:
            ok, checked = self.value(m, "name", as_str, path, f"{fld}.name")
            name = checked if ok else name
        if "description" in m:
            self.value(m, "description", as_str, path, f"{fld}.description")
        if "class" not in m:
            self.add(path, line, f"{fld}.class", "missing required key 'class' (the error class this rule assigns)")
        else:
            ok, cls = self.value(m, "class", class_name, path, f"{fld}.class")
            if ok:
                self.class_refs.append((cls, path, m.key_line("class"), f"{fld}.class"))
        if not any(key in m for key in ("exception", "status", "message", "attribute")):
            self.add(path, line, fld, "a rule needs at least one condition: exception, status, message or attribute")
        idempotent = None
        if "idempotent" in m:
            ok, idempotent = self.value(m, "idempotent", as_bool, path, f"{fld}.idempotent")
        exceptions: tuple[str, ...] = ()
        if "exception" in m:
            raw = m["exception"] if isinstance(m["exception"], list) else [m["exception"]]
            try:
                if not raw:
                    raise ValueError("expected at least one exception class path")
                exceptions = tuple(normalize_exception_path(identifier_path(item)) for item in raw)
            except ValueError as exc:
                self.add(path, m.key_line("exception"), f"{fld}.exception", str(exc))
        statuses = None
        if "status" in m:
            ok, statuses = self.value(m, "status", parse_statuses, path, f"{fld}.status")
        pattern = None
        if "message" in m:
            ok, pattern = self.value(m, "message", _regex, path, f"{fld}.message")
        attributes: tuple[tuple[str, Any], ...] = ()
        if "attribute" in m and (attrs := self.mapping(m["attribute"], path, m.key_line("attribute"),
                                                       f"{fld}.attribute")):
            for key, expected in attrs.items():
                if not isinstance(expected, _SCALAR) or not re.match(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", key):
                    self.add(path, attrs.key_line(key), f"{fld}.attribute.{key}",
                             "expected an attribute name mapped to a scalar (string, number, true/false, null)")
            attributes = tuple(sorted(attrs.items(), key=lambda kv: kv[0]))
        queue, queue_after = None, None
        if "queue" in m:
            ok, queue = self.value(m, "queue", queue_name, path, f"{fld}.queue")
            if ok and "class" in m:
                self.route_refs.append((m["class"], path, m.key_line("queue"), f"{fld}.queue"))
        if "queue_after" in m:
            ok, queue_after = self.value(m, "queue_after", as_int(0), path, f"{fld}.queue_after")
        self.route_keys(m, path, fld, retries=True)
        if len(self.problems) > before:
            return None
        return Rule(name=name, error_class=m["class"], exceptions=exceptions, statuses=statuses, message=pattern,
                    attributes=attributes, source=f"{path}:{line}" if line else path, path=path, line=line,
                    exception_line=m.key_line("exception") if exceptions else None, idempotent=idempotent,
                    queue=queue, queue_after=queue_after)

    def route_keys(self, m: LocatedMap, path: str, fld: str, *, retries: bool) -> None:
        """`queue_after` needs `queue`; `queue` needs a class that retries (a rule's class: see finish)."""
        if "queue_after" in m and "queue" not in m:
            self.add(path, m.key_line("queue_after"), f"{fld}.queue_after",
                     "queue_after needs queue (the queue retries go to after that many retries)")
        if "queue" in m and not retries:
            self.add(path, m.key_line("queue"), f"{fld}.queue",
                     "queue routes retries: it needs action: retry")

    # -- whole-policy checks ------------------------------------------------------------------

    def finish(self, subclass: Mapping[tuple[str, str], bool] | None) -> PolicySpec | None:
        known = {**BUILTIN_CLASSES, **self.classes}
        for name, path, line, fld in self.class_refs:
            if name not in known:
                self.add(path, line, fld, f"unknown error class {name!r}; expected one of: {', '.join(sorted(known))} "
                                          "(or define it under 'classes')")
        for name, path, line, fld in self.route_refs:
            if name in known and known[name].action != "retry":
                self.add(path, line, fld, f"queue routes retries, but class {name!r} does not retry "
                                          f"(action: {known[name].action})")
        # Each layer on its own: a user rule that hides a built-in one overrides it on purpose.
        for scope, rules in (("rules", self.rules), ("rules", self.builtin_rules),
                             *((f"queues.{n}.rules", s.rules) for n, s in self.queues.items()),
                             *((f"actors.{n}.rules", s.rules) for n, s in self.actors.items())):
            self.shadowing(scope, rules, subclass)
        defaults = LeaseSettings()
        ttl = self.lease.get("ttl", defaults.ttl)
        heartbeat = self.lease.get("heartbeat_interval", defaults.heartbeat_interval)
        lease = None
        try:
            check_heartbeat(heartbeat, ttl)
        except HeartbeatTooSlow as exc:
            key = "heartbeat_interval" if "lease.heartbeat_interval" in self.origins else "ttl"
            path, line = self.origins.get(f"lease.{key}", ("<built-in>", 0))
            self.add(path, line or None, f"lease.{key}", str(exc))
        else:
            lease = LeaseSettings(**self.lease)
        if self.problems or lease is None:
            return None
        origins = {key: f"{path}:{line}" if line else path for key, (path, line) in self.origins.items()}
        return PolicySpec(lease=lease, defaults=dict(self.defaults), classes=known,
                          rules=(*self.rules, *self.builtin_rules), queues=dict(self.queues),
                          actors=dict(self.actors), origins=origins)

    def shadowing(self, scope: str, rules: Sequence[Rule],
                  subclass: Mapping[tuple[str, str], bool] | None) -> None:
        for later_index, later in enumerate(rules):
            for earlier in rules[:later_index]:
                if earlier.covers(later, subclass):
                    self.add(later.path or "<policy>", later.line, f"{scope}[{later_index}]",
                             f"rule {later.name!r} is unreachable: rule {earlier.name!r} at {earlier.source} "
                             "matches everything it matches (same or broader match); put the narrower rule first")
                    break


def _regex(value: Any) -> UserPattern:
    if not isinstance(value, str) or not value:
        raise ValueError(f"expected a regular expression string, got {value!r}")
    return compile_pattern(value)


def collect_rules(documents: list[Document]) -> list[Rule]:
    """Every valid rule of `documents` (global, queue and actor rules), even when other parts are wrong."""
    builder = _Builder()
    for doc in documents:
        builder.document(doc)
    rules = [*builder.rules, *builder.builtin_rules]
    for section in (*builder.queues.values(), *builder.actors.values()):
        rules.extend(section.rules)
    return rules


def build_spec(documents: list[Document], *,
               subclass: Mapping[tuple[str, str], bool] | None = None) -> tuple[PolicySpec | None, list[Problem]]:
    """Validate and merge `documents` (in order); the spec, or None and every problem found."""
    builder = _Builder()
    for doc in documents:
        builder.document(doc)
    spec = builder.finish(subclass)
    if spec is not None:
        spec = replace(spec, sources=tuple(d.path for d in documents))
    return spec, builder.problems
