"""Alert candidates, label sets and fingerprints. Pure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..options import UNOWNED
from ..store.alert_facts import JobFact, JobSample
from .rules import AlertRule

__all__ = ["UNOWNED", "Candidate", "build_labels", "fingerprint"]


def fingerprint(labels: Mapping[str, str]) -> str:
    """A stable hash of a label set (order-independent): Alertmanager dedups by the same set."""
    canonical = json.dumps(sorted(labels.items()), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


def build_labels(rule: AlertRule, *, queue: str | None = None, actor: str | None = None,
                 owner: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The label set of one alert of `rule`: identity, routing, ownership and scope; empty values dropped.

    Ownership: a rule with `owner: from_job` takes the owner found with the facts (the job's owner
    column, or the group's), falling back to "unowned" so that routing still has a label to match.
    """
    resolved_owner = (owner or UNOWNED) if rule.owner_from_job else rule.owner
    labels = {**rule.labels, "alertname": rule.name, "severity": rule.severity, "route": rule.route,
              "owner": resolved_owner, "queue": queue or "", "actor": actor or "", **(extra or {})}
    return {k: v for k, v in labels.items() if v != ""}


@dataclass(frozen=True)
class Candidate:
    """An alert whose condition holds in this evaluation (before `for` is applied)."""

    rule: AlertRule
    labels: Mapping[str, str]
    value: float
    context: Mapping[str, Any] = field(default_factory=dict)  # numbers for summaries: age, count, rate...
    jobs: tuple[JobFact, ...] = ()  # the affected jobs, when the facts name them
    sample: JobSample | None = None  # how to find a few affected jobs otherwise

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the label set."""
        return fingerprint(self.labels)
