"""Metrics from synthetic store events and heartbeat hooks (values read with get_sample_value)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reliable.metrics import Metrics


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def ev(event: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"job_id": "j1", "event": event, "at": 1000.0, "actor": "export", "queue": "exports",
                            "from_status": "RUNNING", "to_status": None, "lease_id": 1, "error_class": None,
                            "detail": {}, "started_at": None, "scheduled_at": None, "dispatched_at": None}
    base.update(fields)
    return base


AQ = {"actor": "export", "queue": "exports"}


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_claim_from_pending_observes_dispatch_latency(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m(ev("claim", from_status="PENDING", to_status="RUNNING", at=102.5, scheduled_at=100.0, dispatched_at=101.0))
    assert value(registry, "reliable_transitions_total", event="claim", to_state="RUNNING", **AQ) == 1
    assert value(registry, "reliable_dispatch_latency_seconds_count", **AQ) == 1
    assert value(registry, "reliable_dispatch_latency_seconds_sum", **AQ) == 2.5
    assert value(registry, "reliable_schedule_lateness_seconds_count", **AQ) is None


def test_claim_from_retry_wait_observes_schedule_lateness(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m(ev("claim", from_status="RETRY_WAIT", to_status="RUNNING", at=200.75, scheduled_at=200.0))
    assert value(registry, "reliable_schedule_lateness_seconds_sum", **AQ) == 0.75
    assert value(registry, "reliable_dispatch_latency_seconds_count", **AQ) is None


def test_attempt_outcome_and_duration(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m(ev("succeed", to_status="SUCCEEDED", started_at=100.0, at=130.0))
    m(ev("fail", to_status="FAILED", started_at=100.0, at=100.2, error_class="invalid_input"))
    assert value(registry, "reliable_attempts_total", outcome="succeed", **AQ) == 1
    assert value(registry, "reliable_attempts_total", outcome="fail", **AQ) == 1
    assert value(registry, "reliable_attempt_duration_seconds_sum", outcome="succeed", **AQ) == 30
    assert value(registry, "reliable_attempt_duration_seconds_bucket", outcome="succeed", le="30.0", **AQ) == 1
    assert value(registry, "reliable_attempt_duration_seconds_bucket", outcome="succeed", le="10.0", **AQ) == 0
    assert value(registry, "reliable_attempt_duration_seconds_bucket", outcome="succeed", le="3600.0", **AQ) == 1
    assert value(registry, "reliable_transitions_total", event="succeed", to_state="SUCCEEDED", **AQ) == 1


def test_retries_by_error_class_budget_and_dead_letters(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m(ev("retry_scheduled", to_status="RETRY_WAIT", error_class="transient"))
    m(ev("retry_scheduled", to_status="RETRY_WAIT"))
    m(ev("dead_letter", to_status="DEAD", error_class="transient", detail={"budget_exhausted": True}))
    m(ev("need_review", to_status="REVIEW"))
    m(ev("lease_expired_review", to_status="REVIEW"))
    assert value(registry, "reliable_retries_total", error_class="transient", **AQ) == 1
    assert value(registry, "reliable_retries_total", error_class="none", **AQ) == 1
    assert value(registry, "reliable_retry_budget_exhausted_total", **AQ) == 1
    assert value(registry, "reliable_dead_letters_total", **AQ) == 1
    assert value(registry, "reliable_review_total", **AQ) == 2


def test_lease_expiry_recovery_and_recovery_time(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m(ev("lease_expired", to_status="PENDING", at=500.0, started_at=400.0))
    m(ev("claim", from_status="PENDING", to_status="RUNNING", at=505.0, scheduled_at=500.0, lease_id=2))
    assert value(registry, "reliable_lease_expiries_total", **AQ) == 1
    assert value(registry, "reliable_attempts_total", outcome="lease_expired", **AQ) == 1
    assert value(registry, "reliable_recoveries_total", kind="lease_expired") == 1
    assert value(registry, "reliable_recovery_seconds_sum", kind="lease_expired") == 5
    m(ev("claim", from_status="PENDING", to_status="RUNNING", at=600.0, lease_id=3))
    assert value(registry, "reliable_recovery_seconds_count", kind="lease_expired") == 1  # one recovery, one claim
    m(ev("lease_expired_backoff", to_status="RETRY_WAIT"))
    m(ev("retry_due", from_status="RETRY_WAIT", to_status="PENDING", job_id="j2"))
    m(ev("redispatched", from_status="PENDING", to_status="PENDING", job_id="j3"))
    assert value(registry, "reliable_retries_total", error_class="lease_expired", **AQ) == 1
    assert value(registry, "reliable_recoveries_total", kind="retry_due") == 1
    assert value(registry, "reliable_recoveries_total", kind="redispatched") == 1
    assert value(registry, "reliable_transitions_total", event="redispatched", to_state="PENDING", **AQ) is None


def test_checkpoints_and_checkpoint_age(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m(ev("checkpoint", to_status="RUNNING", started_at=100.0, at=110.0))
    m(ev("checkpoint", to_status="RUNNING", started_at=100.0, at=115.0))
    assert value(registry, "reliable_checkpoints_total", **AQ) == 2
    assert value(registry, "reliable_checkpoint_age_seconds_count", **AQ) == 2
    assert value(registry, "reliable_checkpoint_age_seconds_sum", **AQ) == 15
    assert value(registry, "reliable_transitions_total", event="checkpoint", to_state="RUNNING", **AQ) is None
    m(ev("succeed", to_status="SUCCEEDED", at=120.0))
    m(ev("checkpoint", to_status="RUNNING", started_at=200.0, at=203.0, lease_id=2))  # next attempt
    assert value(registry, "reliable_checkpoint_age_seconds_sum", **AQ) == 18


def test_stale_commits_duplicates_control_and_forced(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m(ev("stale_commit_rejected", detail={"write": "succeed"}))
    m(ev("duplicate_effect", detail={"op_key": "k"}))
    for name in ("pause", "pause_requested", "stop_requested", "cancel", "resume", "restart", "requeue",
                 "reconcile_succeeded"):
        m(ev(name, operator="alice"))
    m(ev("force_stop", from_status="STOPPING", to_status="STOPPED", started_at=1.0, at=2.0))
    assert value(registry, "reliable_stale_commits_total", **AQ) == 1
    assert value(registry, "reliable_duplicate_effects_total", **AQ) == 1
    assert value(registry, "reliable_control_commands_total", command="pause") == 2
    assert value(registry, "reliable_control_commands_total", command="stop") == 1
    assert value(registry, "reliable_control_commands_total", command="reconcile_succeeded") == 1
    assert value(registry, "reliable_forced_terminations_total", **AQ) == 1
    assert value(registry, "reliable_attempts_total", outcome="force_stop", **AQ) == 1


def test_heartbeat_hooks(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m.heartbeat(0.02, renewed=3, lost=1)
    m.heartbeat(0.5, renewed=2, lost=0)
    m.heartbeat_failed()
    assert value(registry, "reliable_lease_renewals_total") == 5
    assert value(registry, "reliable_leases_lost_total") == 1
    assert value(registry, "reliable_leases_held") == 2
    assert value(registry, "reliable_heartbeat_latency_seconds_count") == 2
    assert value(registry, "reliable_heartbeat_latency_seconds_sum") == pytest.approx(0.52)
    assert value(registry, "reliable_heartbeat_failures_total") == 1


def test_missing_labels_and_missing_times_do_not_break(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    m({"event": "succeed", "to_status": "SUCCEEDED"})
    m({"event": "claim"})
    m({})
    assert registry.get_sample_value("reliable_attempts_total",
                                     {"actor": "unknown", "queue": "unknown", "outcome": "succeed"}) == 1
    assert value(registry, "reliable_attempt_duration_seconds_count", actor="unknown", queue="unknown",
                 outcome="succeed") is None


def test_two_metrics_on_one_registry_share_collectors(registry: CollectorRegistry) -> None:
    a, b = Metrics(registry), Metrics(registry)
    a(ev("checkpoint"))
    b(ev("checkpoint"))
    assert value(registry, "reliable_checkpoints_total", **AQ) == 2
    Metrics()  # the default registry, twice: no "Duplicated timeseries"
    Metrics()


def test_import_creates_no_collectors() -> None:
    code = ("import reliable.metrics, reliable.collector, reliable.exporter, reliable.events\n"
            "from prometheus_client import REGISTRY\n"
            "names = [m.name for m in REGISTRY.collect() if m.name.startswith('reliable')]\n"
            "assert names == [], names\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_track_creates_an_actors_counters_at_zero(registry: CollectorRegistry) -> None:
    m = Metrics(registry)
    assert value(registry, "reliable_stale_commits_total", **AQ) is None  # a labelled counter starts absent
    m.track("export", "exports")
    assert value(registry, "reliable_stale_commits_total", **AQ) == 0
    assert value(registry, "reliable_duplicate_effects_total", **AQ) == 0
    assert value(registry, "reliable_transitions_total", event="fail", to_state="FAILED", **AQ) == 0
    assert value(registry, "reliable_retries_total", error_class="none", **AQ) is None  # open-ended label
    m(ev("stale_commit_rejected"))
    assert value(registry, "reliable_stale_commits_total", **AQ) == 1


def test_every_event_of_the_state_machine_is_counted_by_its_kind(registry: CollectorRegistry) -> None:
    """The metrics' event sets come from reliable.states: a new Event is counted, never forgotten."""
    from reliable.states import ATTEMPT_ENDS, TRANSITIONS, Event, target

    m = Metrics(registry)
    for event in Event:
        source = next(state for (state, e) in TRANSITIONS if e is event)
        m(ev(event.value, job_id=f"j-{event.value}", from_status=source.value, to_status=target(event).value))
        assert value(registry, "reliable_transitions_total", event=event.value, to_state=target(event).value,
                     **AQ) == 1, event
        ended = value(registry, "reliable_attempts_total", outcome=event.value, **AQ)
        assert (ended == 1) is (event in ATTEMPT_ENDS), event  # a skip's first source is PENDING: no attempt
    m(ev("skipped", job_id="j-claimed", from_status="RUNNING", to_status="CANCELLED"))
    assert value(registry, "reliable_attempts_total", outcome="skipped", **AQ) == 1  # a claimed job's skip ends one
    assert value(registry, "reliable_transitions_total", event="claim_returned", to_state="PENDING", **AQ) == 1
    assert value(registry, "reliable_attempts_total", outcome="claim_returned", **AQ) is None  # no attempt started
    assert value(registry, "reliable_lease_expiries_total", **AQ) == 4
    assert value(registry, "reliable_dead_letters_total", **AQ) == 3  # dead_letter, lease_expired_dead, unrunnable
    assert value(registry, "reliable_review_total", **AQ) == 2  # need_review, lease_expired_review
    assert value(registry, "reliable_forced_terminations_total", **AQ) == 2
    assert value(registry, "reliable_control_commands_total", command="pause") == 2  # pause, pause_requested
    assert value(registry, "reliable_recoveries_total", kind="lease_expired") == 4
