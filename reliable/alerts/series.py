"""The series reliable exports, with their labels: what a PromQL rule may name. Pure.

`check_expr` finds, in a rule's expression, a `reliable_*` metric reliable does not export (a typo
or a renamed metric: the rule would never fire) and a label that no series it names carries (a
`by`, `on` or matcher label the series lack: the rule groups everything into one alert, or never
matches). Names outside `reliable_` (your own metrics, `up`) are not checked. The table is pinned
to the code by tests/alerts/test_alert_catalogue.py (the workers', supervisors' and exporter's
registries).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["SERIES", "TARGET_LABELS", "check_expr"]

_AQ = ("actor", "queue")
#: Counters (exported with `_total`), gauges and histograms (`_bucket` adds `le`, plus `_sum`,
#: `_count`) -> their labels.
SERIES: Mapping[str, tuple[str, ...]] = {
    # workers (reliable.metrics)
    "reliable_transitions_total": ("event", "to_state", *_AQ),
    "reliable_attempts_total": (*_AQ, "outcome"),
    "reliable_lease_expiries_total": _AQ,
    "reliable_stale_commits_total": _AQ,
    "reliable_retries_total": (*_AQ, "error_class"),
    "reliable_retry_budget_exhausted_total": _AQ,
    "reliable_duplicate_effects_total": _AQ,
    "reliable_possible_duplicate_effects_total": _AQ,
    "reliable_untrusted_options_total": _AQ,
    "reliable_delivery_mismatches_total": _AQ,
    "reliable_dead_letters_total": _AQ,
    "reliable_review_total": _AQ,
    "reliable_checkpoints_total": _AQ,
    "reliable_control_commands_total": ("command",),
    "reliable_forced_terminations_total": _AQ,
    "reliable_recoveries_total": ("kind",),
    "reliable_heartbeat_failures_total": (),
    "reliable_lease_renewals_total": (),
    "reliable_leases_lost_total": (),
    "reliable_leases_held": (),
    "reliable_attempt_duration_seconds": (*_AQ, "outcome"),
    "reliable_dispatch_latency_seconds": _AQ,
    "reliable_schedule_lateness_seconds": _AQ,
    "reliable_heartbeat_latency_seconds": (),
    "reliable_recovery_seconds": ("kind",),
    "reliable_checkpoint_age_seconds": _AQ,
    "reliable_workflow_transitions_total": ("to_status",),
    "reliable_retries_routed_total": (*_AQ, "to_queue"),
    "reliable_limit_deferrals_total": (*_AQ, "limit"),
    "reliable_actor_owner": (*_AQ, "owner"),
    # supervisors (reliable.supervisor.metrics)
    "reliable_worker_children": (),
    "reliable_worker_children_up": (),
    "reliable_worker_restarts_total": ("reason",),
    "reliable_worker_child_last_exit_code": ("child",),
    # the exporter (reliable.collector)
    "reliable_jobs": ("state", "queue"),
    "reliable_dead_letter_jobs": ("queue",),
    "reliable_review_jobs": ("queue",),
    "reliable_oldest_pending_timestamp_seconds": ("queue",),
    "reliable_jobs_stuck": ("state", "queue"),
    "reliable_workflows": ("status",),
    "reliable_schedule_next_slot_timestamp_seconds": ("schedule",),
    "reliable_schedule_last_slot_timestamp_seconds": ("schedule",),
    "reliable_schedule_slot_conflicts_total": ("schedule",),
    "reliable_concurrency_limit": ("actor",),
    "reliable_concurrency_limit_declared": ("actor",),
    "reliable_worker_processes": ("host", "queue"),
    "reliable_queue_paused": ("queue",),
    "reliable_queue_paused_since_timestamp_seconds": ("queue",),
    "reliable_rabbitmq_queue_messages": ("queue",),
    "reliable_rabbitmq_queue_consumers": ("queue",),
    "reliable_collector_errors_total": ("source",),
    "reliable_collector_scrape_seconds": (),
}
_HISTOGRAMS = frozenset(name for name in SERIES if name.endswith("_seconds") and name not in {
    "reliable_oldest_pending_timestamp_seconds", "reliable_schedule_next_slot_timestamp_seconds",
    "reliable_schedule_last_slot_timestamp_seconds", "reliable_queue_paused_since_timestamp_seconds",
    "reliable_collector_scrape_seconds"})
#: Labels Prometheus adds to every scraped series, and those reliable's own alerts add.
TARGET_LABELS = frozenset({"instance", "job", "__name__"})

_METRIC = re.compile(r"\breliable_[a-z0-9_]+\b")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)\s*\"")
_SELECTOR = re.compile(r"\{([^{}]*)\}")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _series(name: str) -> tuple[str, tuple[str, ...]] | None:
    """The exported series `name` is (itself or a histogram's `_bucket`, `_sum`, `_count`) and its labels."""
    if name in SERIES:
        return name, SERIES[name]
    for suffix, extra in (("_bucket", ("le",)), ("_sum", ()), ("_count", ())):
        base = name.removesuffix(suffix)
        if base != name and base in _HISTOGRAMS:
            return name, (*SERIES[base], *extra)
    return None


def check_expr(expr: str, *, added: frozenset[str] = frozenset()) -> list[str]:
    """Problems of `expr` as sentences: unknown `reliable_*` metrics, and labels (in `by`, `on`,
    matchers...) that none of the series it names carries. `added`: labels the expression itself
    creates (`label_replace`), allowed as well."""
    problems: list[str] = []
    labels: set[str] = set(TARGET_LABELS | added)
    names = sorted(set(_METRIC.findall(_STRING.sub('""', expr))))
    for name in names:
        found = _series(name)
        if found is None:
            problems.append(f"unknown metric {name!r}: reliable exports no such series")
        else:
            labels.update(found[1])
    if problems or not names:
        return problems
    used: set[str] = set()
    for group in _GROUPING.findall(expr):
        used.update(label.strip() for label in group.split(",") if label.strip())
    for selector in _SELECTOR.findall(expr):
        used.update(_MATCHER.findall(selector))
    for label in sorted(used - labels):
        problems.append(f"label {label!r} is on none of the series the expression reads ({', '.join(names)})")
    return problems
