"""The shipped ReliableScheduleSlotMissed rule: a slot past its grace without a job, or a slot's job
that ended FAILED or DEAD (facts from the store on both databases; the decision is pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from schedules_support import T0, template

from reliable import Schedule
from reliable.alerts import AlertRule, Facts, load_rules
from reliable.alerts.evaluator import evaluate_rule, requests_for
from reliable.schedules import Scheduler, storage
from reliable.states import Event
from reliable.store import ErrorInfo, StateStore
from reliable.store.alert_facts import JobFact, ScheduleFact, ScheduleSlots
from reliable.store.alert_queries import collect_facts

from support import Clock

SHIPPED = Path(__file__).resolve().parents[2] / "alert_rules" / "store.yaml"
MINUTE = 60


@pytest.fixture
def rule() -> AlertRule:
    (found,) = [r for r in load_rules(SHIPPED) if r.name == "ReliableScheduleSlotMissed"]
    return found


def test_the_rule_asks_for_schedule_facts(rule: AlertRule) -> None:
    assert requests_for(rule) == [ScheduleSlots(late_by=300.0, window=86400.0)]
    assert (rule.severity, rule.route, rule.runbook) == ("warning", "notify", "schedule_missed.md.j2")


def test_decision_is_pure(rule: AlertRule) -> None:
    request = requests_for(rule)[0]
    now = T0 + 3600
    failed = JobFact("j1", "q", "work", "DEAD", now - 100, owner="team-a")
    facts = Facts(now, {request: [
        ScheduleFact("late", "work", "q", grace=60, overdue_slot=now - 300 - 61),  # past grace + late_by
        ScheduleFact("barely", "work", "q", grace=60, overdue_slot=now - 300 - 59),  # not yet
        ScheduleFact("broken", "work", "q", grace=60, failed=(failed,), owner="team-a"),
    ]})
    by_schedule = {c.labels["schedule"]: c for c in evaluate_rule(rule, facts)}
    assert set(by_schedule) == {"late", "broken"}
    assert by_schedule["late"].value == 361 and by_schedule["late"].context["missed"] is True
    assert by_schedule["broken"].jobs == (failed,) and by_schedule["broken"].labels["owner"] == "team-a"
    assert by_schedule["broken"].context["failed"] == 1 and by_schedule["broken"].context["missed"] is False


def alerts(store: StateStore, rule: AlertRule, now: float) -> dict[str, float]:
    facts = collect_facts(store, requests_for(rule), now)
    return {c.labels["schedule"]: c.value for c in evaluate_rule(rule, facts)}


def test_facts_from_the_store(clocked: tuple[StateStore, Clock], rule: AlertRule) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    storage.declare(store, Schedule("paused", "work", every="1m", paused=True), template())
    assert alerts(store, rule, T0 + MINUTE) == {}
    fired = Scheduler(store, None).tick(T0 + MINUTE).fired
    # No scheduler ran since: the next slot (T0 + 2 min) passes its 60 s grace and the rule's 5 min.
    assert alerts(store, rule, T0 + 2 * MINUTE + 60 + 300) == {}
    assert alerts(store, rule, T0 + 2 * MINUTE + 60 + 301) == {"m": 361.0}  # the paused one never alerts
    Scheduler(store, None).tick(T0 + 8 * MINUTE)
    assert alerts(store, rule, T0 + 8 * MINUTE) == {}

    claim = store.claim(fired[0].job_id, worker_id="w", lease_ttl=30)
    store.finish(fired[0].job_id, claim.lease_id, Event.FAIL, worker_id="w",
                 error=ErrorInfo("invalid_input", "ValueError", "bad"))
    assert alerts(store, rule, T0 + 8 * MINUTE) == {"m": 1.0}
    # a day on, the failure is out of the window; the slot due at T0 + 9 min is overdue
    assert alerts(store, rule, T0 + MINUTE + 86400 + 1) == {"m": 86400 + 1 - 8 * MINUTE}


def test_store_collector_gauges(clocked: tuple[StateStore, Clock]) -> None:
    from reliable.collector import StoreCollector

    store, _ = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    storage.declare(store, Schedule("paused", "work", every="1m", paused=True), template())
    Scheduler(store, None).tick(T0 + 2 * MINUTE)
    families = {f.name: f for f in StoreCollector(store).collect()}
    assert {s.labels["schedule"]: s.value for s in families["reliable_schedule_next_slot_timestamp_seconds"].samples} \
        == {"m": T0 + 3 * MINUTE}
    assert {s.labels["schedule"]: s.value for s in families["reliable_schedule_last_slot_timestamp_seconds"].samples} \
        == {"m": T0 + 2 * MINUTE}
