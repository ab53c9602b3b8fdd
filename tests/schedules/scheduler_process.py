"""A scheduler process for the acceptance test, driven line by line on stdin (no sleeps anywhere).

    python scheduler_process.py declare AT   import the app, store its schedules as if at epoch AT
    python scheduler_process.py run          a Scheduler over the store; on stdin:
        tick FIRST LAST                      tick every minute from FIRST to LAST (epoch seconds,
                                             inclusive) with a simulated clock, then print one JSON line
        quit

`run` does not import the app: the templates in the store are all it needs to fire a slot.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

from reliable.store import StateStore


def declare(at: float) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "apps"))
    import schedules_app

    from reliable.schedules.boot import declare_schedules

    store = StateStore(os.environ["RELIABLE_TEST_STORE"], clock=lambda: at)
    declare_schedules(store, schedules_app.middleware, schedules_app.broker, schedules_app.SCHEDULES)
    store.close()


def run() -> None:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    from reliable.schedules import Scheduler

    store = StateStore(os.environ["RELIABLE_TEST_STORE"])
    scheduler = Scheduler(store, RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"]))
    for line in sys.stdin:
        words = line.split()
        if words[0] == "quit":
            break
        first, last = int(words[1]), int(words[2])
        fired: Counter[str] = Counter()
        skipped: list[dict[str, object]] = []
        unpublished = 0
        for minute in range(first, last + 1, 60):
            report = scheduler.tick(minute)
            fired.update(f.schedule for f in report.fired)
            skipped.extend({"schedule": s.schedule, "count": s.count} for s in report.skipped)
            unpublished += len(report.unpublished)
        print(json.dumps({"pid": os.getpid(), "fired": dict(fired), "skipped": skipped, "unpublished": unpublished}),
              flush=True)
    store.close()


if __name__ == "__main__":
    if sys.argv[1] == "declare":
        declare(float(sys.argv[2]))
    else:
        run()
