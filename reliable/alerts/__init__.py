"""Alerting: YAML rules, store evaluation, Prometheus rule export, runbooks, Alertmanager delivery.

Importing this package registers the `reliable_alerts` table on the store's metadata.
"""

from __future__ import annotations

from ..store.alert_facts import EventCount, EventCounts, Facts, GroupAge, GroupAges, JobFact, StaleJobs
from .client import AlertmanagerClient, DeliveryError
from .conditions import BurnWindow, PromQLCondition, StoreCondition
from .config import AlertConfig, load_config
from .engine import AlertEngine, DeliveryReport, Evaluation
from .evaluator import evaluate, requests_for
from .lifecycle import AlertState, DeliveryPolicy, advance, after_send, payload
from .model import Candidate, fingerprint
from .promql import export_yaml
from .rules import AlertRule, load_rules, parse_rules
from .runbooks import RunbookRenderer

__all__ = [
    "AlertConfig",
    "AlertEngine",
    "AlertRule",
    "AlertState",
    "AlertmanagerClient",
    "BurnWindow",
    "Candidate",
    "DeliveryError",
    "DeliveryPolicy",
    "DeliveryReport",
    "Evaluation",
    "EventCount",
    "EventCounts",
    "Facts",
    "GroupAge",
    "GroupAges",
    "JobFact",
    "PromQLCondition",
    "RunbookRenderer",
    "StaleJobs",
    "StoreCondition",
    "advance",
    "after_send",
    "evaluate",
    "export_yaml",
    "fingerprint",
    "load_config",
    "load_rules",
    "parse_rules",
    "payload",
    "requests_for",
]
