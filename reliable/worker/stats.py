"""The worker process's share of the latency and outcome history (reliable.store.job_stats).

`StatsBuffer` counts the process's claims and attempt ends as the store hands them to its listeners
(after each commit, in memory); `StatsFlusher` writes them once per heartbeat interval, in one
transaction however many jobs ran (one statement, compiled once per process, executed for each
table row of the flush: no statement per job, the worker's hot path gains no round trip),
deletes the rows past their horizon every `PRUNE_EVERY` flushes, and writes what is left when the
process shuts down. A flush that cannot reach the store keeps its counts for the next one.
"""

from __future__ import annotations

import logging
import threading

from ..errors import StoreError
from ..store.core import StoreCore
from ..store.job_stats import StatsBuffer, prune_stats, write_stats

__all__ = ["PRUNE_EVERY", "StatsFlusher"]

logger = logging.getLogger("reliable.worker")

#: Flushes between two deletions of the rows past their horizon (about ten minutes at 10 s).
PRUNE_EVERY = 60


class StatsFlusher:
    """A daemon thread writing a StatsBuffer's counts every `interval` seconds (see the module doc)."""

    def __init__(self, store: StoreCore, buffer: StatsBuffer, *, interval: float) -> None:
        self.store, self.buffer, self.interval = store, buffer, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.flushes = 0

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="reliable-stats", daemon=True)
            self._thread.start()

    def flush(self) -> int:
        """Write the counts so far (table rows written; 0 when the store could not be reached: kept)."""
        rows = self.buffer.take()
        if not rows:
            return 0
        try:
            return write_stats(self.store, rows)
        except StoreError as exc:
            self.buffer.put_back(rows)
            logger.warning("job stats not written (kept for the next flush): %s", exc)
            return 0

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.flush()
                self.flushes += 1
                if self.flushes % PRUNE_EVERY == 0:
                    prune_stats(self.store)
            except Exception:  # never let the counts stop a worker
                logger.exception("job stats flush failed")

    def stop(self) -> None:
        """Stop the thread and write what is left."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        try:
            self.flush()
        except Exception:
            logger.exception("job stats: the last flush failed")
