"""Alert rules: frozen dataclasses loaded from YAML with errors that name file, line and field.

A rule file holds one top-level key, `rules`, a list of rules::

    rules:
      - name: JobStuck                 # CamelCase; becomes the alertname label
        kind: store                    # store (evaluated by `reliable alerts run`) or promql (exported)
        condition: {type: stuck, states: [RUNNING], older_than: 1h}
        for: 1m                        # "30s", "5m", "1h30m" or seconds
        severity: warning              # critical | warning | info
        owner: from_job                # a team, or from_job (the job's owner column)
        route: notify                  # page | notify | ticket
        labels: {area: jobs}
        annotations: {summary: "..."}
        runbook: job_stuck.md.j2       # a template in runbooks/
        key: jobs-stuck                # optional: the condition it evaluates (default: its runbook)
        enabled: true                  # false: kept in the file, evaluated and exported nowhere

One condition, one alert: two enabled rules naming the same runbook or the same `key` evaluate the
same condition (they would page twice for one incident, to two owners) and are refused, naming both.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..durations import parse_duration
from ..errors import PolicyError
from ..yamlfile import Located, LocatedMap, LocatedSeq, parse, read_text
from .conditions import PromQLCondition, StoreCondition, parse_condition
from .series import check_expr

__all__ = [
    "FROM_JOB",
    "RESERVED_LABELS",
    "ROUTES",
    "SEVERITIES",
    "AlertRule",
    "load_rules",
    "parse_rules",
    "rule_files",
    "same_conditions",
]

FROM_JOB = "from_job"
SEVERITIES = ("critical", "warning", "info")
ROUTES = ("page", "notify", "ticket")
#: Labels reliable sets itself; a rule may not override them.
RESERVED_LABELS = frozenset({"alertname", "severity", "route", "owner", "queue", "actor", "job_id", "state"})
RESERVED_ANNOTATIONS = frozenset({"runbook_url", "runbook"})

_NAME = re.compile(r"[A-Z][A-Za-z0-9]*")
_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_RUNBOOK = re.compile(r"[a-z0-9][a-z0-9_\-]*\.md\.j2")
_OWNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/@]*")
_KEYS = {"name", "kind", "condition", "for", "severity", "owner", "route", "labels", "annotations", "runbook", "key",
         "enabled"}
_KEY = re.compile(r"[a-z0-9][a-z0-9_.\-]*")
_REQUIRED = ("name", "kind", "condition", "severity", "owner", "route")


@dataclass(frozen=True)
class AlertRule:
    """One validated alert rule."""

    name: str
    kind: str  # "store" or "promql"
    condition: StoreCondition | PromQLCondition
    for_seconds: float
    severity: str
    owner: str  # a team name, or FROM_JOB
    route: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    runbook: str | None = None
    path: str = "<memory>"
    line: int = 0
    key: str | None = None
    enabled: bool = True

    @property
    def owner_from_job(self) -> bool:
        """Whether the owner label is taken from each job's owner column."""
        return self.owner == FROM_JOB

    @property
    def condition_keys(self) -> tuple[str, ...]:
        """What identifies the condition this rule evaluates: its declared key and its runbook."""
        return tuple(k for k in (self.key and f"key {self.key!r}", self.runbook and f"runbook {self.runbook!r}") if k)


def _string(value: Any, where: Located, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise where.error(f"{name} must be a non-empty string, got {value!r}", name)
    return value


def _choice(value: Any, where: Located, name: str, choices: Iterable[str]) -> str:
    options = tuple(choices)
    if value not in options:
        raise where.error(f"{name} must be one of {', '.join(options)}, got {value!r}", name)
    return str(value)


def _string_map(value: Any, where: Located, name: str, reserved: frozenset[str]) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, LocatedMap):
        raise where.error(f"{name} must be a mapping of names to strings", name)
    out: dict[str, str] = {}
    for key, item in value.items():
        at = value.at(key)
        if not _LABEL.fullmatch(key):
            raise at.error(f"{name} key {key!r} is not a valid name ([a-zA-Z_][a-zA-Z0-9_]*)", f"{name}.{key}")
        if key in reserved:
            raise at.error(f"{name} key {key!r} is set by reliable and cannot be overridden", f"{name}.{key}")
        if isinstance(item, bool) or not isinstance(item, str | int | float):
            raise at.error(f"{name}.{key} must be a string, got {item!r}", f"{name}.{key}")
        out[key] = str(item)
    return out


def _check_series(condition: PromQLCondition, raw: Any) -> None:
    """Refuse an expression naming a reliable metric that does not exist or a label its series lack."""
    at = raw.at("expr") if isinstance(raw, LocatedMap) else raw
    problems = check_expr(condition.expr)
    if not problems and condition.owner_on:
        problems = [problem.replace("label", "owner_on label", 1)
                    for problem in check_expr(condition.expr + f" by ({', '.join(condition.owner_on)})")]
    if problems:
        raise at.error("; ".join(problems), "condition.expr")


def _parse_rule(raw: Any, where: Located) -> AlertRule:
    if not isinstance(raw, LocatedMap):
        raise where.error("each rule must be a mapping")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        key = unknown[0]
        raise raw.at(key).error(f"unknown key {key!r} (allowed: {', '.join(sorted(_KEYS))})", key)
    for key in _REQUIRED:
        if key not in raw:
            raise raw.where.error(f"missing required key {key!r}", key)
    name = _string(raw["name"], raw.at("name"), "name")
    if not _NAME.fullmatch(name):
        raise raw.at("name").error(f"name {name!r} must be CamelCase letters and digits (e.g. JobStuck)", "name")
    kind = _choice(raw["kind"], raw.at("kind"), "kind", ("store", "promql"))
    condition = parse_condition(kind, raw["condition"], raw.at("condition"))
    try:
        for_seconds = parse_duration(raw.get("for", 0))
    except ValueError as exc:
        raise raw.at("for").error(str(exc), "for") from None
    severity = _choice(raw["severity"], raw.at("severity"), "severity", SEVERITIES)
    route = _choice(raw["route"], raw.at("route"), "route", ROUTES)
    owner = _string(raw["owner"], raw.at("owner"), "owner")
    if isinstance(condition, PromQLCondition):
        _check_series(condition, raw["condition"])
    joined = isinstance(condition, PromQLCondition) and bool(condition.owner_on)
    if owner == FROM_JOB and kind == "promql" and not joined:
        raise raw.at("owner").error("owner: from_job on a PromQL rule needs condition.owner_on (the labels naming "
                                    "the actor, and queue, the owner is joined on), or name a team", "owner")
    if joined and owner != FROM_JOB:
        raise raw.at("condition").error("condition.owner_on joins the owner of the jobs: it needs owner: from_job",
                                        "condition.owner_on")
    if owner != FROM_JOB and not _OWNER.fullmatch(owner):
        raise raw.at("owner").error(f"owner {owner!r} must be a team name or from_job", "owner")
    labels = _string_map(raw.get("labels"), raw.at("labels"), "labels", RESERVED_LABELS)
    annotations = _string_map(raw.get("annotations"), raw.at("annotations"), "annotations", RESERVED_ANNOTATIONS)
    runbook = raw.get("runbook")
    if runbook is not None:
        runbook = _string(runbook, raw.at("runbook"), "runbook")
        if not _RUNBOOK.fullmatch(runbook):
            raise raw.at("runbook").error(
                f"runbook {runbook!r} must be a template file name like job_stuck.md.j2 (no directories)", "runbook")
    declared = raw.get("key")
    if declared is not None and (not isinstance(declared, str) or not _KEY.fullmatch(declared)):
        raise raw.at("key").error(f"key must be a lower-case name like dead-letters, got {declared!r}", "key")
    enabled = raw.get("enabled", True)
    if not isinstance(enabled, bool):
        raise raw.at("enabled").error(f"enabled must be true or false, got {enabled!r}", "enabled")
    return AlertRule(name=name, kind=kind, condition=condition, for_seconds=for_seconds, severity=severity,
                     owner=owner, route=route, labels=labels, annotations=annotations, runbook=runbook,
                     path=raw.where.path, line=raw.where.line, key=declared, enabled=enabled)


def parse_rules(text: str, path: str = "<memory>") -> list[AlertRule]:
    """Parse and validate the rules in one YAML document; PolicyError on the first problem."""
    doc = parse(text, path)
    if doc is None:
        return []
    if not isinstance(doc, LocatedMap):
        raise PolicyError("a rule file must be a mapping with a `rules` list", path=path, line=1)
    unknown = sorted(set(doc) - {"rules"})
    if unknown:
        raise doc.at(unknown[0]).error(f"unknown top-level key {unknown[0]!r} (allowed: rules)", unknown[0])
    raw_rules = doc.get("rules")
    if raw_rules is None:
        return []
    if not isinstance(raw_rules, LocatedSeq):
        raise doc.at("rules").error("`rules` must be a list", "rules")
    return [_parse_rule(raw, raw_rules.at(i)) for i, raw in enumerate(raw_rules)]


def rule_files(path: Path) -> list[Path]:
    """The rule files at `path`: the file itself, or every *.yaml / *.yml in the directory, sorted."""
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
    if not path.exists():
        raise PolicyError("no such file or directory", path=str(path))
    return [path]


def same_conditions(rules: Iterable[AlertRule]) -> list[PolicyError]:
    """One problem per enabled rule that evaluates the condition of an earlier enabled rule (the same
    runbook or the same declared key), naming both: one incident would page twice."""
    problems: list[PolicyError] = []
    seen: dict[str, AlertRule] = {}
    for rule in rules:
        if not rule.enabled:
            continue
        for key in rule.condition_keys:
            first = seen.setdefault(key, rule)
            if first is not rule:
                problems.append(PolicyError(
                    f"rules {first.name!r} ({first.path}:{first.line}) and {rule.name!r} evaluate the same condition "
                    f"({key}): one incident would page twice; keep one, or set enabled: false on the other",
                    path=rule.path, line=rule.line, field="key" if key.startswith("key") else "runbook"))
                break
    return problems


def load_rules(path: Path | str, *, collect: list[PolicyError] | None = None) -> list[AlertRule]:
    """Load every rule under `path` (a file or a directory of *.yaml); names must be unique, and no
    two enabled rules may evaluate the same condition (`same_conditions`).

    With `collect`, problems are appended to it (the first of each file, plus duplicate names and
    conditions) and the valid rules are returned; without it, the first problem is raised as a
    PolicyError. Disabled rules are returned too (`AlertRule.enabled`): every consumer skips them.
    """
    problems: list[PolicyError] = [] if collect is None else collect
    rules: list[AlertRule] = []
    seen: dict[str, AlertRule] = {}
    for file in rule_files(Path(path)):
        try:
            parsed = parse_rules(read_text(file, "rule file"), str(file))
        except PolicyError as exc:
            if collect is None:
                raise
            problems.append(exc)
            continue
        for rule in parsed:
            first = seen.setdefault(rule.name, rule)
            if first is not rule:
                dup = PolicyError(f"duplicate rule name {rule.name!r} (first defined at {first.path}:{first.line})",
                                  path=rule.path, line=rule.line, field="name")
                if collect is None:
                    raise dup
                problems.append(dup)
                continue
            rules.append(rule)
    for problem in same_conditions(rules):
        if collect is None:
            raise problem
        problems.append(problem)
    return rules
