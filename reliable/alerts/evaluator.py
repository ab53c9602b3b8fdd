"""Store rules over facts: which alerts hold now. Pure (no I/O): facts in, candidates out.

One alert per stuck job (label job_id, so that each resolves on its own; Alertmanager alerts are
not metrics and an id label costs nothing there). Every other store rule alerts per group:
(queue, actor) for event rules, queue for age rules, actor (or queue) for error-budget burn.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from ..policy.model import RATE_LIMITED_MARK
from ..store.alert_facts import (
    ATTEMPT_FAILURE_EVENTS,
    DEAD_EVENTS,
    FAILURE_EVENTS,
    LEASE_EXPIRY_EVENTS,
    SUCCESS_EVENTS,
    EventCount,
    EventCounts,
    Facts,
    GroupAges,
    JobSample,
    ScheduleSlots,
    StaleJobs,
)
from .burn import evaluate_burn
from .conditions import StoreCondition
from .model import Candidate, build_labels
from .rules import AlertRule

__all__ = ["evaluate", "evaluate_rule", "requests_for"]

_EVENT_RULES: dict[str, tuple[str, ...]] = {
    "dead_letters": DEAD_EVENTS,
    "repeated_failures": ATTEMPT_FAILURE_EVENTS,
    "lease_expiries": LEASE_EXPIRY_EVENTS,
    "retry_storm": ("retry_scheduled",),
    "budget_exhausted": ("retry_scheduled", "dead_letter"),
}
#: Event rules that watch jobs left in a state (not a rate): only jobs still in it count, so the
#: alert resolves when they move on (e.g. a dead letter requeued), not when the window has passed.
_STILL_IN: dict[str, tuple[str, ...]] = {"dead_letters": ("DEAD",)}
_AGE_STATES = {"review_age": "REVIEW", "queue_age": "PENDING", "schedule_lateness": "RETRY_WAIT"}
#: schedule_missed: how far back a slot whose job failed keeps its schedule's alert firing.
DEFAULT_SCHEDULE_WINDOW = 86400.0
#: How the retry policy marks a decision taken because the retry budget ran out (compact JSON).
BUDGET_MARK = '"budget_exhausted":true'


def _condition(rule: AlertRule) -> StoreCondition:
    assert isinstance(rule.condition, StoreCondition), f"{rule.name} is not a store rule"
    return rule.condition


def requests_for(rule: AlertRule) -> list[Any]:
    """The fact requests `rule` needs (hashable; equal requests are queried once)."""
    c = _condition(rule)
    if c.type == "stuck":
        return [StaleJobs(c.states, c.older_than or 0.0, "state", c.limit)]
    if c.type == "checkpoint_lag":
        return [StaleJobs(("RUNNING",), c.older_than or 0.0, "checkpoint", c.limit)]
    if c.type in _AGE_STATES:
        return [GroupAges(_AGE_STATES[c.type], c.older_than or 0.0)]
    if c.type in _EVENT_RULES:
        detail = BUDGET_MARK if c.type == "budget_exhausted" else None
        return [EventCounts(_EVENT_RULES[c.type], c.window or 0.0, detail, _STILL_IN.get(c.type, ()))]
    if c.type == "failure_rate":
        # A rate-limited retry (a 429 honoured) is the partner's throttling, not the actor failing:
        # it has its own alert (the policy's rate_limit.alert_after).
        return [EventCounts(SUCCESS_EVENTS + ATTEMPT_FAILURE_EVENTS, c.window or 0.0, detail_lacks=RATE_LIMITED_MARK)]
    if c.type == "schedule_missed":
        return [ScheduleSlots(c.older_than or 0.0, c.window or DEFAULT_SCHEDULE_WINDOW)]
    if c.type == "error_budget_burn":
        lengths = sorted({w for bw in c.burn_windows for w in (bw.long, bw.short)})
        return [EventCounts(SUCCESS_EVENTS + FAILURE_EVENTS, length) for length in lengths]
    raise AssertionError(f"unknown condition type {c.type}")


def _group(counts: Iterable[EventCount], key: str = "queue_actor") -> dict[tuple[str, str], list[EventCount]]:
    groups: dict[tuple[str, str], list[EventCount]] = defaultdict(list)
    for row in counts:
        if key == "actor":
            groups[("", row.actor)].append(row)
        elif key == "queue":
            groups[(row.queue, "")].append(row)
        else:
            groups[(row.queue, row.actor)].append(row)
    return groups


def _owner(rows: Sequence[EventCount]) -> str | None:
    owners = sorted({r.owner for r in rows if r.owner})
    return owners[0] if owners else None


def _stale(rule: AlertRule, c: StoreCondition, facts: Facts) -> list[Candidate]:
    request = requests_for(rule)[0]
    out = []
    for job in facts.stale(request):
        age = facts.now - job.since
        if age < (c.older_than or 0.0):
            continue
        extra = {"job_id": job.job_id, "state": job.status}
        labels = build_labels(rule, queue=job.queue, actor=job.actor, owner=job.owner, extra=extra)
        out.append(Candidate(rule, labels, age, {"age": age, "state": job.status, "job_id": job.job_id}, (job,)))
    return out


def _ages(rule: AlertRule, c: StoreCondition, facts: Facts) -> list[Candidate]:
    request = requests_for(rule)[0]
    out = []
    for group in facts.ages(request):
        age = facts.now - group.oldest
        if group.count < 1 or age < (c.older_than or 0.0):
            continue
        labels = build_labels(rule, queue=group.queue, owner=group.owner)
        sample = JobSample(queue=group.queue, states=(request.state,))
        out.append(Candidate(rule, labels, age, {"age": age, "count": group.count, "state": request.state},
                             sample=sample))
    return out


def _event_threshold(rule: AlertRule, c: StoreCondition, facts: Facts) -> list[Candidate]:
    request = requests_for(rule)[0]
    out = []
    for (queue, actor), rows in sorted(_group(facts.counts(request)).items()):
        count = sum(r.count for r in rows)
        if count < c.min_count:
            continue
        labels = build_labels(rule, queue=queue, actor=actor, owner=_owner(rows))
        sample = JobSample(queue=queue, actor=actor, events=request.events, since=facts.now - request.window,
                           detail_contains=request.detail_contains, still_in=request.still_in)
        context = {"count": count, "window": request.window, "by_event": {r.event: r.count for r in rows}}
        out.append(Candidate(rule, labels, float(count), context, sample=sample))
    return out


def _failure_rate(rule: AlertRule, c: StoreCondition, facts: Facts) -> list[Candidate]:
    request = requests_for(rule)[0]
    out = []
    for (queue, actor), rows in sorted(_group(facts.counts(request)).items()):
        bad = sum(r.count for r in rows if r.event in ATTEMPT_FAILURE_EVENTS)
        total = sum(r.count for r in rows)
        if total < c.min_events or total == 0:
            continue
        ratio = bad / total
        if ratio < (c.threshold or 1.0):
            continue
        labels = build_labels(rule, queue=queue, actor=actor, owner=_owner(rows))
        sample = JobSample(queue=queue, actor=actor, events=ATTEMPT_FAILURE_EVENTS, since=facts.now - request.window)
        context = {"ratio": ratio, "failures": bad, "total": total, "window": request.window}
        out.append(Candidate(rule, labels, ratio, context, sample=sample))
    return out


def _burn(rule: AlertRule, c: StoreCondition, facts: Facts) -> list[Candidate]:
    per_group: dict[tuple[str, str], dict[float, tuple[int, int]]] = defaultdict(dict)
    owners: dict[tuple[str, str], list[EventCount]] = defaultdict(list)
    for request in requests_for(rule):
        for key, rows in _group(facts.counts(request), c.group_by).items():
            good = sum(r.count for r in rows if r.event in SUCCESS_EVENTS)
            bad = sum(r.count for r in rows if r.event in FAILURE_EVENTS)
            per_group[key][request.window] = (good, bad)
            owners[key].extend(rows)
    out = []
    for (queue, actor), counts in sorted(per_group.items()):
        result = evaluate_burn(counts, c.slo or 0.0, c.burn_windows, c.min_events)
        if result is None:
            continue
        labels = build_labels(rule, queue=queue, actor=actor, owner=_owner(owners[(queue, actor)]))
        w = result.window
        context = {"slo": c.slo, "factor": w.factor, "long_window": w.long, "short_window": w.short,
                   "long_rate": result.long_rate, "short_rate": result.short_rate}
        sample = JobSample(queue=queue or None, actor=actor or None, events=FAILURE_EVENTS, since=facts.now - w.short)
        out.append(Candidate(rule, labels, result.long_rate, context, sample=sample))
    return out


def _schedules(rule: AlertRule, c: StoreCondition, facts: Facts) -> list[Candidate]:
    """One alert per schedule whose next slot is overdue (no scheduler decided it: nothing fired it) or
    one of whose recent slots' jobs ended FAILED or DEAD. Value: how overdue (s), else the failures."""
    request = requests_for(rule)[0]
    assert isinstance(request, ScheduleSlots)
    out = []
    for fact in facts.schedules(request):
        overdue = facts.now - fact.overdue_slot if fact.overdue_slot is not None else None
        missed = overdue is not None and overdue > fact.grace + request.late_by
        if not missed and not fact.failed:
            continue
        labels = build_labels(rule, queue=fact.queue, actor=fact.actor, owner=fact.owner,
                              extra={"schedule": fact.schedule})
        late = overdue if missed and overdue is not None else 0.0
        context = {"schedule": fact.schedule, "missed_slot": fact.overdue_slot if missed else None,
                   "overdue": late, "failed": len(fact.failed), "missed": missed}
        out.append(Candidate(rule, labels, late or float(len(fact.failed)), context, fact.failed))
    return out


def evaluate_rule(rule: AlertRule, facts: Facts) -> list[Candidate]:
    """The alerts `rule` raises over `facts` (before `for` is applied)."""
    c = _condition(rule)
    if c.type in ("stuck", "checkpoint_lag"):
        return _stale(rule, c, facts)
    if c.type in _AGE_STATES:
        return _ages(rule, c, facts)
    if c.type in _EVENT_RULES:
        return _event_threshold(rule, c, facts)
    if c.type == "failure_rate":
        return _failure_rate(rule, c, facts)
    if c.type == "schedule_missed":
        return _schedules(rule, c, facts)
    return _burn(rule, c, facts)


def evaluate(rules: Iterable[AlertRule], facts: Facts) -> list[Candidate]:
    """Every alert the enabled store rules raise over `facts`; PromQL rules are skipped (Prometheus runs them)."""
    out: list[Candidate] = []
    for rule in rules:
        if rule.kind == "store" and rule.enabled:
            out.extend(evaluate_rule(rule, facts))
    return out
