"""`in_job_run`: the one place that says whether the calling thread runs a job (a durable attempt
or a fast-path run), which a send's store wait (reliable.worker.runtime) and its publish deadline
(reliable.worker.publishing) both ask. No service: a real JobContext and FastRun, never run."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any, cast

from reliable.store import Claim
from reliable.worker.context import FastRun, JobContext, _fast_run, in_job_run


def attempt() -> JobContext:
    job = SimpleNamespace(job_id="job-1", checkpoint=None, lease_id=1, attempt_id="attempt-1")
    return JobContext(cast(Any, None), Claim(cast(Any, job)), cast(Any, None), worker_id="w", lease_ttl=30.0)


def test_a_durable_attempt_is_a_run_from_enter_to_leave() -> None:
    assert not in_job_run()
    context = attempt()
    assert context.enter()
    try:
        assert in_job_run()
        elsewhere: list[bool] = []
        thread = threading.Thread(target=lambda: elsewhere.append(in_job_run()))
        thread.start()
        thread.join(10)
        assert elsewhere == [False]  # another thread runs no job
    finally:
        context.leave()
    assert not in_job_run()


def test_a_fast_path_run_is_a_run() -> None:
    token = _fast_run.set(FastRun("job-2", lambda: cast(Any, None)))
    try:
        assert in_job_run()
    finally:
        _fast_run.reset(token)
    assert not in_job_run()
