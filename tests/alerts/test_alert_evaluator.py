"""The pure evaluator, lifecycle and burn-rate math over facts built in memory (no I/O)."""

from __future__ import annotations

import pytest

from reliable.alerts import (
    AlertState,
    DeliveryPolicy,
    EventCount,
    Facts,
    GroupAge,
    JobFact,
    advance,
    after_send,
    evaluate,
    fingerprint,
    parse_rules,
    payload,
    requests_for,
)
from reliable.alerts.burn import burn_rate, evaluate_burn
from reliable.alerts.conditions import DEFAULT_BURN_WINDOWS, BurnWindow
from reliable.alerts.rules import AlertRule

NOW = 1_800_000_000.0
POLICY = DeliveryPolicy(evaluation_interval=30, resend_interval=60, resolved_resend_for=900, backoff_initial=5,
                        backoff_max=300)


def rule(condition: str, *, for_: str = "0s", owner: str = "from_job", name: str = "TestAlert") -> AlertRule:
    (parsed,) = parse_rules(f"""rules:
  - name: {name}
    kind: store
    condition: {condition}
    for: {for_}
    severity: warning
    owner: {owner}
    route: notify
    labels: {{team_area: jobs}}
""")
    return parsed


def job(job_id: str, since: float, status: str = "RUNNING", owner: str | None = "team-data") -> JobFact:
    return JobFact(job_id=job_id, queue="exports", actor="export", status=status, since=since, owner=owner,
                   attempt=2, attempt_id=f"att-{job_id}")


def facts_for(r: AlertRule, rows: list[object], now: float = NOW) -> Facts:
    (request,) = requests_for(r)
    return Facts.of(now, {request: rows})


def test_stuck_one_alert_per_job_with_labels() -> None:
    r = rule("{type: stuck, states: [RUNNING, PAUSED], older_than: 10m}")
    found = evaluate([r], facts_for(r, [job("j1", NOW - 3600), job("j2", NOW - 60), job("j3", NOW - 700, "PAUSED",
                                                                                     owner=None)]))
    assert [c.labels["job_id"] for c in found] == ["j1", "j3"]
    assert found[0].labels == {"alertname": "TestAlert", "severity": "warning", "route": "notify", "owner": "team-data",
                               "queue": "exports", "actor": "export", "job_id": "j1", "state": "RUNNING",
                               "team_area": "jobs"}
    assert found[1].labels["owner"] == "unowned"
    assert found[0].value == pytest.approx(3600)
    assert found[0].jobs[0].job_id == "j1"


def test_fixed_owner_overrides_job_owner() -> None:
    r = rule("{type: stuck, older_than: 10m}", owner="platform")
    (c,) = evaluate([r], facts_for(r, [job("j1", NOW - 3600)]))
    assert c.labels["owner"] == "platform"


def test_fingerprint_is_order_independent_and_label_sensitive() -> None:
    assert fingerprint({"a": "1", "b": "2"}) == fingerprint({"b": "2", "a": "1"})
    assert fingerprint({"a": "1"}) != fingerprint({"a": "2"})
    assert len(fingerprint({})) == 32


def test_queue_age_groups_by_queue() -> None:
    r = rule("{type: queue_age, older_than: 15m}")
    rows = [GroupAge("exports", 3, NOW - 1800, "team-data"), GroupAge("mail", 1, NOW - 60, None)]
    (c,) = evaluate([r], facts_for(r, rows))
    assert c.labels["queue"] == "exports" and "actor" not in c.labels and c.context["count"] == 3
    assert c.sample is not None and c.sample.states == ("PENDING",)


def test_event_threshold_sums_events_per_queue_actor() -> None:
    r = rule("{type: dead_letters, window: 30m, min_count: 3}")
    rows = [EventCount("q", "a", "dead_letter", 2, "t"), EventCount("q", "a", "lease_expired_dead", 1, "t"),
            EventCount("q", "b", "dead_letter", 2, "t")]
    (c,) = evaluate([r], facts_for(r, rows))
    assert (c.labels["actor"], c.value) == ("a", 3.0)
    assert c.context["by_event"] == {"dead_letter": 2, "lease_expired_dead": 1}


def test_dead_letters_count_only_jobs_still_dead() -> None:
    r = rule("{type: dead_letters, window: 30m}")
    (request,) = requests_for(r)
    assert request.still_in == ("DEAD",)  # a requeued job no longer counts: the alert resolves
    (c,) = evaluate([r], facts_for(r, [EventCount("q", "a", "dead_letter", 1, "t")]))
    assert c.sample is not None and c.sample.still_in == ("DEAD",)
    for rate_like in ("{type: retry_storm, window: 5m, min_count: 1}",
                      "{type: lease_expiries, window: 5m, min_count: 1}",
                      "{type: repeated_failures, window: 5m, min_count: 1}", "{type: budget_exhausted, window: 5m}"):
        assert requests_for(rule(rate_like))[0].still_in == (), rate_like  # events in the window, by design


def test_budget_exhausted_asks_for_the_detail_mark() -> None:
    r = rule("{type: budget_exhausted, window: 15m}")
    (request,) = requests_for(r)
    assert request.detail_contains == '"budget_exhausted":true'


def test_failure_rate_needs_min_events_and_threshold() -> None:
    r = rule("{type: failure_rate, window: 15m, threshold: 0.5, min_events: 10}")
    few = [EventCount("q", "a", "fail", 4, None), EventCount("q", "a", "succeed", 1, None)]
    assert evaluate([r], facts_for(r, few)) == []
    many = [EventCount("q", "a", "retry_scheduled", 8, None), EventCount("q", "a", "succeed", 4, None)]
    (c,) = evaluate([r], facts_for(r, many))
    assert c.value == pytest.approx(8 / 12)
    low = [EventCount("q", "a", "fail", 2, None), EventCount("q", "a", "succeed", 18, None)]
    assert evaluate([r], facts_for(r, low)) == []


def test_burn_rate_math() -> None:
    assert burn_rate(0, 0, 0.99) == 0
    assert burn_rate(99, 1, 0.99) == pytest.approx(1.0)
    assert burn_rate(856, 144, 0.99) == pytest.approx(14.4)
    assert burn_rate(0, 10, 0.999) == pytest.approx(1000)


def test_multiwindow_needs_both_windows() -> None:
    windows = DEFAULT_BURN_WINDOWS  # 14.4x over 1h and 5m, 6x over 6h and 30m
    burning_long_only = {3600.0: (800, 200), 300.0: (100, 0), 21600.0: (10000, 10), 1800.0: (100, 0)}
    assert evaluate_burn(burning_long_only, 0.99, windows) is None
    fast = {3600.0: (800, 200), 300.0: (80, 20), 21600.0: (10000, 10), 1800.0: (100, 0)}
    result = evaluate_burn(fast, 0.99, windows)
    assert result is not None and result.window.factor == 14.4
    assert result.long_rate == pytest.approx(20) and result.short_rate == pytest.approx(20)
    slow6 = {3600.0: (95, 5), 300.0: (9, 1), 21600.0: (930, 70), 1800.0: (90, 10)}
    result = evaluate_burn(slow6, 0.99, windows)
    assert result is not None and result.window == BurnWindow(21600, 1800, 6.0)
    assert evaluate_burn(fast, 0.99, windows, min_events=5000) is None


def test_burn_rule_groups_by_actor_over_all_windows() -> None:
    r = rule("{type: error_budget_burn, slo: 0.99, windows: [{long: 1h, short: 5m, factor: 14.4}]}")
    requests = requests_for(r)
    assert sorted(q.window for q in requests) == [300.0, 3600.0]
    by_window = {
        3600.0: [EventCount("q1", "a", "succeed", 400, "t"), EventCount("q2", "a", "succeed", 400, "t"),
                 EventCount("q1", "a", "dead_letter", 200, "t"), EventCount("q1", "b", "succeed", 100, "u")],
        300.0: [EventCount("q1", "a", "succeed", 8, "t"), EventCount("q1", "a", "fail", 2, "t"),
                EventCount("q1", "b", "need_review", 100, "u")],
    }
    facts = Facts.of(NOW, {q: by_window[q.window] for q in requests})
    (c,) = evaluate([r], facts)
    assert c.labels["actor"] == "a" and "queue" not in c.labels and c.labels["owner"] == "t"
    assert c.context["long_rate"] == pytest.approx(20) and c.context["short_rate"] == pytest.approx(20)


def test_for_pending_then_firing_then_resolved_then_deleted() -> None:
    r = rule("{type: stuck, older_than: 10m}", for_="2m")
    stuck = facts_for(r, [job("j1", NOW - 3600)])
    (c,) = evaluate([r], stuck)
    states, deleted = advance({}, [c], NOW, POLICY)
    s = states[c.fingerprint]
    assert s.state == "pending" and s.pending_since == NOW and s.next_send_at is None and not deleted
    states, _ = advance(states, [c], NOW + 60, POLICY)
    assert states[c.fingerprint].state == "pending"
    states, _ = advance(states, [c], NOW + 120, POLICY)
    s = states[c.fingerprint]
    assert (s.state, s.starts_at, s.next_send_at) == ("firing", NOW + 120, NOW + 120)
    s = after_send(s, NOW + 121, POLICY)
    assert s.last_sent_at == NOW + 121 and s.next_send_at == NOW + 181
    states, _ = advance({s.fingerprint: s}, [], NOW + 150, POLICY)
    s = states[c.fingerprint]
    assert (s.state, s.ends_at, s.next_send_at) == ("resolved", NOW + 150, NOW + 150)
    body = payload(s, NOW + 151, POLICY)
    assert body["endsAt"] == "2027-01-15T08:02:30.000Z" and body["labels"]["job_id"] == "j1"
    # resent for 15 minutes after resolution, then dropped
    t = NOW + 151
    while s.next_send_at is not None:
        s = after_send(s, t, POLICY)
        t += 60
    assert s.last_sent_at is not None and s.last_sent_at <= NOW + 150 + 900
    states, deleted = advance({s.fingerprint: s}, [], t, POLICY)
    assert deleted == {s.fingerprint} and not states


def test_pending_that_clears_is_dropped_silently() -> None:
    r = rule("{type: stuck, older_than: 10m}", for_="5m")
    (c,) = evaluate([r], facts_for(r, [job("j1", NOW - 3600)]))
    states, _ = advance({}, [c], NOW, POLICY)
    states, deleted = advance(states, [], NOW + 30, POLICY)
    assert deleted == {c.fingerprint} and not states


def test_undelivered_resolution_is_kept_and_retried_with_backoff() -> None:
    s = AlertState("fp", "A", {"alertname": "A"}, "resolved", starts_at=NOW - 100, ends_at=NOW, next_send_at=NOW)
    for attempt, wait in enumerate([5, 10, 20, 40, 80, 160, 300, 300], start=1):
        s = after_send(s, NOW, POLICY, error="connection refused")
        assert s.send_attempts == attempt and s.next_send_at == NOW + wait
    states, deleted = advance({"fp": s}, [], NOW + 3600, POLICY)
    assert not deleted and states["fp"].state == "resolved"


def test_firing_payload_ends_after_four_intervals() -> None:
    s = AlertState("fp", "A", {"alertname": "A"}, "firing", annotations={"summary": "x"}, starts_at=NOW)
    body = payload(s, NOW, POLICY, "http://gen")
    assert body["startsAt"] == "2027-01-15T07:59:59.999Z" or body["startsAt"].startswith("2027-01-15T08:00:00")
    assert body["endsAt"].startswith("2027-01-15T08:04:00")  # now + 4 x max(30s, 60s)
    assert body["generatorURL"] == "http://gen" and body["annotations"] == {"summary": "x"}


def test_refiring_after_resolution_starts_anew() -> None:
    r = rule("{type: stuck, older_than: 10m}")
    (c,) = evaluate([r], facts_for(r, [job("j1", NOW - 3600)]))
    old = AlertState(c.fingerprint, "TestAlert", dict(c.labels), "resolved", starts_at=NOW - 500, ends_at=NOW - 100,
                     last_sent_at=NOW - 90, next_send_at=NOW - 30)
    states, _ = advance({c.fingerprint: old}, [c], NOW, POLICY)
    s = states[c.fingerprint]
    assert (s.state, s.starts_at, s.ends_at) == ("firing", NOW, None)
