"""The policy engine: YAML policies, error classification, retry decisions and job contracts.

Pure logic: only `reliable.policy.source` reads files. The middleware calls `Policy.load`,
`Policy.contract`, `Policy.decide` and `Policy.decide_crash`; see docs/policies.md for the format.
"""

from __future__ import annotations

from ..durations import format_duration, parse_duration
from .engine import THROWS_RULE, Policy
from .matching import Rule
from .model import (
    BUILTIN_CLASSES,
    BackoffSettings,
    ClassSpec,
    Decision,
    Failure,
    JobContract,
    LeaseSettings,
    RateLimitSettings,
    RetryBudget,
    check_heartbeat,
)
from .schema import Problem
from .timing import backoff_ceiling, backoff_delay, parse_retry_after, retry_after_of

__all__ = [
    "BUILTIN_CLASSES",
    "THROWS_RULE",
    "BackoffSettings",
    "ClassSpec",
    "Decision",
    "Failure",
    "JobContract",
    "LeaseSettings",
    "Policy",
    "Problem",
    "RateLimitSettings",
    "RetryBudget",
    "Rule",
    "backoff_ceiling",
    "backoff_delay",
    "check_heartbeat",
    "format_duration",
    "parse_duration",
    "parse_retry_after",
    "retry_after_of",
]
