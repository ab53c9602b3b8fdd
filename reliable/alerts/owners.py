"""Owners the jobs carry: a rule naming a team none of its jobs belongs to routes its alerts to
nobody who owns the failure (`reliable alerts check --store URL`). Pure over an injected lookup.

A rule with a fixed `owner` is checked against the owners of the jobs it is about: a PromQL rule's
equality matchers on `queue` and `actor` select them (a rule matching neither, like a process-wide
heartbeat rule, is about no job and is not checked); a store rule is about every job.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..errors import PolicyError
from ..options import UNOWNED
from .conditions import PromQLCondition
from .rules import AlertRule

__all__ = ["OwnersOf", "owner_problems"]

#: (queue or None, actor or None) -> the owners of those jobs (None for jobs without one).
OwnersOf = Callable[[str | None, str | None], set[str | None]]
_EQUALS = re.compile(r'\b(queue|actor)\s*=\s*"([^"\\]*)"')


def owner_problems(rules: Iterable[AlertRule], owners_of: OwnersOf) -> list[PolicyError]:
    """One problem per enabled rule whose fixed owner none of its jobs carries (when it has jobs)."""
    problems = []
    for rule in rules:
        if not rule.enabled or rule.owner_from_job:
            continue
        selected: dict[str, str] = {}
        if isinstance(rule.condition, PromQLCondition):
            selected = dict(_EQUALS.findall(rule.condition.expr))
            if not selected:
                continue
        owners = owners_of(selected.get("queue"), selected.get("actor"))
        if not owners:
            continue  # no job yet: nothing to compare with
        carried = {owner or UNOWNED for owner in owners}
        if rule.owner not in carried:
            about = ", ".join(f'{k}="{v}"' for k, v in sorted(selected.items())) or "every job"
            problems.append(PolicyError(
                f"owner {rule.owner!r}: the jobs this rule is about ({about}) never carry it (their owners: "
                f"{', '.join(sorted(carried))}); name one of them, or owner: from_job",
                path=rule.path, line=rule.line, field="owner"))
    return problems
