"""How many event lines ~200 jobs put in the log: about one INFO line per state change by default.

Each job checkpoints three times; one in ten fails once and is retried. At INFO the default
("transitions") writes, per job, `enqueued` and the attempt's outcome (`succeed`), plus for a
retried job `retry_scheduled`, the retry's `retry_due` when recovery moves it (not here: the
StubBroker delivers the retry at its eta) and its second outcome. Claims and checkpoints go to
DEBUG. "all" writes every event at INFO, "none" nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dramatiq
import pytest

import reliable
from reliable.errors import ConfigError
from reliable.events import LOGGER_NAME

from middleware_harness import make_harness

JOBS = 200
FLAKY_EVERY = 10


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.by_level: Counter[tuple[str, str]] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        event = getattr(record, "reliable_event", {})
        self.by_level[(record.levelname, str(event.get("event")))] += 1


@pytest.fixture
def counted() -> Iterator[_Count]:
    logger = logging.getLogger(LOGGER_NAME)
    handler = _Count()
    level, propagate = logger.level, logger.propagate
    logger.addHandler(handler)  # a handler already there: install's json_logs adds no stderr one
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)
    logger.propagate = propagate


def run_jobs(sqlite_url: str, policy_file: Path, **install: object) -> None:
    made = make_harness(sqlite_url, policy_file, threads=4, metrics=False, json_logs=True, **install)
    failed_once: set[int] = set()

    @dramatiq.actor(actor_name="export")
    def export(n: int) -> None:
        job = reliable.current_job()
        for page in range(3):
            job.checkpoint(page + 1)
        if n % FLAKY_EVERY == 0 and n not in failed_once:
            failed_once.add(n)
            raise TimeoutError("flaky")

    try:
        for n in range(JOBS):
            export.send(n)
        made.run()
    finally:
        made.close()


def test_default_logs_one_info_line_per_state_change(sqlite_url: str, policy_file: Path, counted: _Count) -> None:
    run_jobs(sqlite_url, policy_file)
    info = Counter({event: n for (level, event), n in counted.by_level.items() if level == "INFO"})
    debug = Counter({event: n for (level, event), n in counted.by_level.items() if level == "DEBUG"})
    retried = JOBS // FLAKY_EVERY
    assert info == {"enqueued": JOBS, "succeed": JOBS, "retry_scheduled": retried}, info
    assert sum(info.values()) == 2 * JOBS + retried  # 420 lines for 200 jobs
    assert debug == {"claim": JOBS + retried, "checkpoint": 3 * (JOBS + retried)}, debug


def test_all_logs_every_event_at_info_and_none_logs_nothing(sqlite_url: str, policy_file: Path,
                                                            counted: _Count) -> None:
    run_jobs(sqlite_url, policy_file, log_events="all")
    levels = {level for level, _ in counted.by_level}
    assert levels == {"INFO"}
    assert counted.by_level[("INFO", "checkpoint")] == 3 * (JOBS + JOBS // FLAKY_EVERY)
    counted.by_level.clear()
    run_jobs(sqlite_url, policy_file, log_events="none")
    assert not counted.by_level


def test_unknown_mode_is_refused_naming_the_modes(sqlite_url: str, policy_file: Path) -> None:
    with pytest.raises(ConfigError, match="log_events must be one of transitions, all, none, got 'some'"):
        reliable.ReliableMiddleware(sqlite_url, log_events="some")
