"""The Grafana dashboard is valid JSON and only queries metrics reliable exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from reliable.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "reliable" / "defaults" / "grafana" / "reliable-dashboard.json"
STORE_FAMILIES = {
    "reliable_jobs", "reliable_oldest_pending_timestamp_seconds", "reliable_jobs_stuck", "reliable_dead_letter_jobs",
    "reliable_review_jobs", "reliable_rabbitmq_queue_messages", "reliable_collector_errors_total",
    "reliable_collector_scrape_seconds", "reliable_schedule_next_slot_timestamp_seconds",
    "reliable_schedule_last_slot_timestamp_seconds",
}


def test_dashboard_is_valid_and_uses_known_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    registry = CollectorRegistry()
    Metrics(registry)
    known = set(STORE_FAMILIES)
    for family in registry.collect():
        known.add(family.name)
        known.update(s.name for s in family.samples)
        known.update(f"{family.name}{suffix}" for suffix in ("_total", "_bucket", "_sum", "_count"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(dashboard["panels"]) >= 10
    used = {name for expr in exprs for name in re.findall(r"reliable_[a-z_]+", expr)}
    assert used - known == set()
    for panel in dashboard["panels"]:
        assert panel["datasource"]["uid"] == "${datasource}"
