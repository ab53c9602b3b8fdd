"""Sample alerts of a store rule, one per grouping it can raise, for `alerts check` to render. Pure.

A template that names a label only some alerts carry (`labels.job_id` on a rule grouped per
actor, `labels.actor` on an error-budget rule grouped per queue) fails only when such an alert
fires, and then reaches Alertmanager as "(template error: ...)". So `alerts check` renders every
store rule's summary, description and runbook against the alerts this module makes: invented facts
that make the rule hold, passed through the evaluator itself (`evaluate_rule`), so the label sets
are exactly the ones a real evaluation gives. Each grouping comes twice: with an owner and every
optional fact, and without them; each alert is rendered with one affected job and with none (the
jobs may have moved on by the time it is rendered).
"""

from __future__ import annotations

from typing import Any

from ..store.alert_facts import (
    SUCCESS_EVENTS,
    EventCount,
    EventCounts,
    Facts,
    GroupAge,
    GroupAges,
    JobFact,
    ScheduleFact,
    ScheduleSlots,
    StaleJobs,
)
from ..store.alert_queries import AttemptFact, JobContext
from .conditions import StoreCondition
from .evaluator import evaluate_rule, requests_for
from .model import Candidate
from .rules import AlertRule

__all__ = ["SAMPLE_NOW", "sample_alerts", "sample_job"]

#: The evaluation time of the samples (a fixed date: the samples are the same on every run).
SAMPLE_NOW = 1_767_225_600.0
_HOUR = 3600.0


def _jobs(status: str, since: float) -> list[JobFact]:
    full = JobFact("sample-job-1", "sample-queue", "sample_actor", status, since, owner="sample-team", attempt=2,
                   attempt_id="sample-attempt-2", checkpoint='{"page": 3}', checkpoint_at=since,
                   last_error_class="transient", last_error_message="sample error", trace_id="0af7" * 8)
    bare = JobFact("sample-job-2", "other-queue", "other_actor", status, since)
    return [full, bare]


def _answer(request: Any, c: StoreCondition) -> list[Any]:
    long_ago = SAMPLE_NOW - 1000 * _HOUR
    if isinstance(request, StaleJobs):
        return _jobs(request.states[0] if request.states else "RUNNING", long_ago)
    if isinstance(request, GroupAges):
        return [GroupAge("sample-queue", 3, long_ago, owner="sample-team"), GroupAge("other-queue", 1, long_ago)]
    if isinstance(request, EventCounts):
        # Bad events only: every rate and burn holds, every count passes its minimum.
        count = max(c.min_count, c.min_events, 1) * 10
        events = [e for e in request.events if e not in SUCCESS_EVENTS] or ["fail"]
        return [row for event in events for row in (
            EventCount("sample-queue", "sample_actor", event, count, owner="sample-team"),
            EventCount("other-queue", "other_actor", event, count))]
    if isinstance(request, ScheduleSlots):
        failed = tuple(_jobs("FAILED", long_ago))
        return [ScheduleFact("sample-schedule", "sample_actor", "sample-queue", 60.0, overdue_slot=long_ago,
                             failed=failed, owner="sample-team"),
                ScheduleFact("other-schedule", "other_actor", "other-queue", 60.0, failed=failed[1:])]
    raise AssertionError(f"no sample for {type(request).__name__}")  # a new request kind needs one here


def sample_alerts(rule: AlertRule) -> list[Candidate]:
    """The alerts a store rule raises over sample facts: each grouping, with and without owner and details."""
    assert isinstance(rule.condition, StoreCondition), f"{rule.name} is not a store rule"
    answers = {request: _answer(request, rule.condition) for request in requests_for(rule)}
    return evaluate_rule(rule, Facts.of(SAMPLE_NOW, answers))


def sample_job(candidate: Candidate) -> JobContext:
    """An affected job of `candidate` with one recent attempt, as the alert engine would fetch it."""
    job = candidate.jobs[0] if candidate.jobs else _jobs("RUNNING", SAMPLE_NOW - _HOUR)[0]
    attempt = AttemptFact("sample-attempt-2", 2, "sample-worker", SAMPLE_NOW - _HOUR, None, None, None)
    return JobContext(job, (attempt,))
