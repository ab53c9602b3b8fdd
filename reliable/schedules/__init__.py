"""Recurring jobs: schedules that fire exactly one job per slot, with no leader (docs/schedules.md).

`Schedule` declares one (in code, or YAML through `load_schedules`); `reliable.install(broker,
store=..., schedules=[...] or "schedules.yaml")` stores them at worker boot; `Scheduler` fires due
slots (every worker's recovery thread runs one; `reliable schedules run` is one on its own).
"""

from __future__ import annotations

from .cron import Cron, Every, parse_cron
from .model import MISFIRE_POLICIES, MisfirePlan, Schedule, load_schedules, plan_misfire
from .scheduler import Scheduler, Skipped, TickReport

__all__ = ["MISFIRE_POLICIES", "Cron", "Every", "MisfirePlan", "Schedule", "Scheduler", "Skipped", "TickReport",
           "load_schedules", "parse_cron", "plan_misfire"]
