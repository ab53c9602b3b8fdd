"""A Dramatiq app on StubBroker, run under `reliable worker` by tests/supervisor (no service needed).

Each child enqueues one job at import: it creates $MARK_DIR/<pid>.started, takes $STUB_JOB_SECONDS
(default 3) and creates $MARK_DIR/<pid>.done.
"""

from __future__ import annotations

import os
import time

import dramatiq
from dramatiq.brokers.stub import StubBroker

broker = StubBroker()
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="q", time_limit=600_000)
def work(mark: str) -> None:
    """Mark the start, take $STUB_JOB_SECONDS, mark the end."""
    open(mark + ".started", "w").close()
    time.sleep(float(os.environ.get("STUB_JOB_SECONDS", "3")))
    open(mark + ".done", "w").close()


work.send(os.path.join(os.environ["MARK_DIR"], str(os.getpid())))
