"""The supervisor's Prometheus metrics: children up, restarts by reason, each child's last exit code.

Collectors live on an injected registry (the supervisor's own, never the global one), created in
`SupervisorMetrics.__init__`. They are served on ``--metrics-port`` (`serve`) or written to a
node-exporter textfile (`write_textfile`, atomically).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server, write_to_textfile

from ..multiprocess import ENV, compact

__all__ = ["RESTART_REASONS", "SupervisorMetrics", "forget_process"]

#: The `reason` label of reliable_worker_restarts_total (every one exported from the start, at 0).
RESTART_REASONS: tuple[str, ...] = ("crash", "operator_stop", "recycle_jobs", "recycle_memory", "reload")


class SupervisorMetrics:
    """The metrics of one `reliable worker` supervisor."""

    def __init__(self, registry: CollectorRegistry, processes: int) -> None:
        self.registry = registry
        # Modes for the host's multiprocess directory (`reliable.multiprocess`): summed over the
        # supervisors alive; without one they are plain gauges.
        self.children = Gauge("reliable_worker_children", "Child worker processes the supervisor keeps running",
                              registry=registry, multiprocess_mode="livesum")
        self.children_up = Gauge("reliable_worker_children_up",
                                 "Child worker processes alive and ready (consuming)", registry=registry,
                                 multiprocess_mode="livesum")
        self.restarts = Counter("reliable_worker_restarts", "Child worker processes replaced, by reason",
                                ["reason"], registry=registry)
        self.last_exit_code = Gauge("reliable_worker_child_last_exit_code",
                                    "Exit code of the last child of each slot (-N: killed by signal N)",
                                    ["child"], registry=registry, multiprocess_mode="liveall")
        self.children.set(processes)
        for reason in RESTART_REASONS:
            self.restarts.labels(reason)

    def child_exited(self, slot: int, returncode: int) -> None:
        """Record the exit code of slot `slot`'s child."""
        self.last_exit_code.labels(str(slot)).set(returncode)

    def restarted(self, reason: str) -> None:
        """Count one replacement."""
        self.restarts.labels(reason).inc()

    def up(self, count: int) -> None:
        """Set how many children are ready."""
        self.children_up.set(count)

    def serve(self, port: int, host: str) -> None:
        """Serve /metrics on host:port from a daemon thread."""
        start_http_server(port, addr=host, registry=self.registry)

    def write_textfile(self, path: str) -> None:
        """Write the metrics to `path` (atomically: a temporary file renamed over it)."""
        write_to_textfile(path, self.registry)


def forget_process(pid: int) -> None:
    """With a multiprocess directory, fold the files of the dead child `pid` (and any other process
    gone) into the merged ones: its counters keep counting, its gauges stop (`reliable.multiprocess`)."""
    directory = os.environ.get(ENV)
    if directory:
        compact(directory)
