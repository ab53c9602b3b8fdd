"""`reliable worker`: a supervisor that restarts a crashed Dramatiq worker process instead of stopping all.

Modules: `exits` (exit codes, what a child's exit means), `restarts` (backoff and crash-loop window),
`child` (the child process: Dramatiq's Worker), `metrics` (Prometheus), `supervisor` (the loop).
See docs/worker.md.
"""

from __future__ import annotations

from .exits import (
    CHILD_CONFIG,
    CHILD_CONNECT,
    CHILD_IMPORT,
    CHILD_KILLED,
    CHILD_OK,
    CHILD_RECYCLE_JOBS,
    CHILD_RECYCLE_MEMORY,
    EXIT_APP,
    EXIT_CRASH_LOOP,
    EXIT_KILLED,
    EXIT_OK,
)
from .metrics import RESTART_REASONS, SupervisorMetrics
from .restarts import Backoff, CrashWindow, parse_crash_loop
from .supervisor import Supervisor, SupervisorConfig

__all__ = [
    "CHILD_CONFIG",
    "CHILD_CONNECT",
    "CHILD_IMPORT",
    "CHILD_KILLED",
    "CHILD_OK",
    "CHILD_RECYCLE_JOBS",
    "CHILD_RECYCLE_MEMORY",
    "EXIT_APP",
    "EXIT_CRASH_LOOP",
    "EXIT_KILLED",
    "EXIT_OK",
    "RESTART_REASONS",
    "Backoff",
    "CrashWindow",
    "Supervisor",
    "SupervisorConfig",
    "SupervisorMetrics",
    "parse_crash_loop",
]
