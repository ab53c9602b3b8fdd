"""The worker's group-commit callbacks run in Metrics.together (reliable.metrics): exact once acknowledged."""

from __future__ import annotations

from pathlib import Path

import dramatiq
from prometheus_client import CollectorRegistry

from reliable.metrics import Metrics
from reliable.states import JobStatus
from reliable.store import StateStore

from middleware_harness import make_harness


def test_a_workers_fast_successes_are_counted_once_acknowledged(pg_store: StateStore, pg_database: str,
                                                               policy_file: Path) -> None:
    """The worker runs each group-commit batch's callbacks in Metrics.together: the counters are
    written before the batch's acknowledgements are sent (a joined broker sees them all)."""
    registry = CollectorRegistry()
    setup = make_harness(pg_database, policy_file, metrics=Metrics(registry), json_logs=False, threads=8)
    try:
        @dramatiq.actor(fast_path=True)
        def step(n: int) -> None:
            pass

        for n in range(40):
            step.send(n)
        setup.run()
        assert pg_store.count_by_status() == {JobStatus.SUCCEEDED: 40}
        labels = {"actor": "step", "queue": "default"}
        assert registry.get_sample_value("reliable_transitions_total",
                                         {"event": "fast_succeed", "to_state": "SUCCEEDED", **labels}) == 40
        assert registry.get_sample_value("reliable_attempts_total", {"outcome": "fast_succeed", **labels}) == 40
        batches = setup.store.group_commit_stats()
        assert batches is not None and batches[0] > 0
    finally:
        setup.close()
