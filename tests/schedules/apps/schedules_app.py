"""A Dramatiq app with three schedules, for the scheduler acceptance test. Settings from the environment.

`every_minute` (misfire skip), `quarter_once` (run_once) and `quarter_catch_up` (catch_up, at most 3),
all with a 30 s grace. The actor appends its job id to a file of its process: the test counts runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker

import reliable

QUEUE = os.environ["RELIABLE_TEST_QUEUE"]
RUNS = Path(os.environ["RELIABLE_TEST_RUNS"])

SCHEDULES = [
    reliable.Schedule("every_minute", "slot_job", cron="* * * * *", kwargs={"schedule": "every_minute"},
                      misfire="skip", misfire_grace=30),
    reliable.Schedule("quarter_once", "slot_job", cron="*/15 * * * *", kwargs={"schedule": "quarter_once"},
                      misfire="run_once", misfire_grace=30),
    reliable.Schedule("quarter_catch_up", "slot_job", cron="*/15 * * * *", kwargs={"schedule": "quarter_catch_up"},
                      misfire="catch_up", catch_up_max=3, misfire_grace=30),
]

broker = RabbitmqBroker(url=os.environ["RELIABLE_TEST_BROKER"])
middleware = reliable.install(broker, store=os.environ["RELIABLE_TEST_STORE"], schedules=SCHEDULES,
                              recovery_interval=float(os.environ.get("RELIABLE_TEST_RECOVERY_INTERVAL", "1")))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name=QUEUE)
def slot_job(schedule: str) -> None:
    """Record this run: one line with the job id in this process's file."""
    with (RUNS / str(os.getpid())).open("a") as runs:
        runs.write(f"{reliable.current_job().job_id}\n")
