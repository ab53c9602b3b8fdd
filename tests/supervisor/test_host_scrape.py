"""One scrape target per host (issue 29, item 1): `reliable worker` and `reliable exporter` on their
defaults, a job that succeeds and one that goes DEAD; the exporter's /metrics has every series the
shipped PromQL rules use, and promtool, fed the scraped series, fires the dead-letter alert.

Neither process is told where the workers' metrics are (PROMETHEUS_MULTIPROC_DIR unset): they meet
in the per-user default directory.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from reliable.alerts import export_yaml, load_rules
from reliable.multiprocess import ENV

from supervised import Supervised
from support import Samples, exporter, promtool_fires, require_service, sample_value, scrape, wait_for
from workers import send

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SERIES = re.compile(r"\b(reliable_[a-z_]+)\b")
#: Gauges with nothing to report here, absent by design: absent, their rules have nothing to alert on.
ABSENT_WHEN_NOTHING = {
    "reliable_concurrency_limit": "only actors with a concurrency limit (reliable.limits) have one",
    "reliable_concurrency_limit_declared": "ditto",
    "reliable_oldest_pending_timestamp_seconds": "a queue with no due PENDING job has no oldest one",
    "reliable_queue_paused_since_timestamp_seconds": "only a paused queue has one (reliable_queue_paused is 0 "
                                                     "for the others)",
    "reliable_rabbitmq_queue_consumers": "the broker's view: only `reliable exporter --broker` has it (the "
                                         "rule reading it stays silent without: tests/promtool/workers_rules_test.yml)",
}


def shipped_rules() -> str:
    """The shipped PromQL rules, exported as Prometheus reads them."""
    return export_yaml([rule for rule in load_rules(ROOT / "alert_rules") if rule.kind == "promql"])


def used_series(rules: str) -> set[str]:
    """The reliable_* series an exported rule file reads."""
    exported = yaml.safe_load(rules)
    return {name for group in exported["groups"] for rule in group["rules"] for name in SERIES.findall(rule["expr"])}


def test_one_scrape_has_every_series_the_rules_use_and_the_dead_letter_alert_fires(
        producer: Any, worker_env: dict[str, str], queue_name: str, supervise: Callable[..., Supervised],
        tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    require_service("promtool (Debian package `prometheus`)", promtool is not None)
    assert promtool is not None
    broker, store = producer
    sup = supervise({**worker_env, ENV: ""}, "-p", "2", "-t", "1", "-Q", queue_name, app="scrape_app")
    sup.wait_ready(2)
    labels = {"actor": "doomed", "queue": queue_name}

    with exporter(worker_env["RELIABLE_TEST_STORE"]) as base:
        def dead_letters(count: int) -> Samples | None:
            samples = scrape(base)
            return samples if sample_value(samples, "reliable_dead_letters_total", **labels) == count else None

        # Known actors' labelled counters are there at 0 before their first event.
        before = wait_for(lambda: dead_letters(0), "the workers' counters at 0 on the exporter", timeout=30,
                          context=sup.output)
        fine, doomed = send(broker, queue_name, "fine"), send(broker, queue_name, "doomed")
        wait_for(lambda: store.get(doomed.message_id).status.value == "DEAD"
                 and store.get(fine.message_id).status.value == "SUCCEEDED", "one job DEAD, one SUCCEEDED",
                 timeout=60, context=sup.output)
        after = wait_for(lambda: dead_letters(1), "the dead letter counted on the exporter", timeout=30,
                         context=sup.output)

    # Every series the shipped rules read is on the one target (supervisor's and children's included).
    rules = shipped_rules()
    missing = sorted(name for name in used_series(rules) - ABSENT_WHEN_NOTHING.keys()
                     if sample_value(after, name) is None)
    assert not missing, f"the exporter lacks {missing}"
    assert sample_value(after, "reliable_attempts_total", **labels) == 1
    assert sample_value(after, "reliable_transitions_total", event="succeed", actor="fine", queue=queue_name) == 1
    assert sample_value(after, "reliable_worker_restarts_total", reason="crash") is not None

    # promtool, fed the scraped dead-letter transitions (before, then after), fires the fast burn: every
    # outcome of the actor failed (no worker's owner series fed here: owner "unowned").
    dead = {**labels, "event": "dead_letter", "to_state": "DEAD"}
    series = "reliable_transitions_total{" + ",".join(f'{k}="{v}"' for k, v in sorted(dead.items())) + "}"
    was, now = sample_value(before, "reliable_transitions_total", **dead), \
        sample_value(after, "reliable_transitions_total", **dead)
    assert was is not None and now is not None
    promtool_fires(promtool, rules, tmp_path, series, was, now, "ReliableErrorBudgetBurnFast",
                   {"actor": labels["actor"], "owner": "unowned", "route": "page", "severity": "critical"})
