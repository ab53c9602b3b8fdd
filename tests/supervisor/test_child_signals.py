"""`reliable worker` with its real children, on a StubBroker app (no service): how a stop reaches a running job.

systemd's default KillMode=control-group TERMs the supervisor and every child at once: the child's
own TERM and the supervisor's forwarded one are one graceful request, so the running job finishes
and the exit is 0. A second TERM to the supervisor is the hard stop (SIGUSR1 to the children): exit
1. A job longer than --shutdown-timeout is abandoned, and the exit code says so (1).
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from supervised import Supervised
from support import wait_for

Supervise = Callable[..., Supervised]


def start(supervise: Supervise, tmp_path: Path, job_seconds: float, *args: str) -> tuple[Supervised, int]:
    """A supervisor of one child running one job of `job_seconds` s; it and the child's PID once the job started."""
    sup = supervise({"MARK_DIR": str(tmp_path), "STUB_JOB_SECONDS": str(job_seconds)}, "-p", "1", "-t", "1", *args,
                    app="stub_app")
    started = wait_for(lambda: list(tmp_path.glob("*.started")), "the job started", timeout=60, context=sup.output)
    return sup, int(started[0].stem)


@pytest.mark.parametrize("extra_terms", [0, 20])
def test_term_to_the_whole_process_group_finishes_the_running_job(
        supervise: Supervise, tmp_path: Path, extra_terms: int) -> None:
    sup, child = start(supervise, tmp_path, 2.0)
    sup.signal_group(signal.SIGTERM)  # `systemctl stop` with KillMode=control-group
    for _ in range(extra_terms):  # however many TERMs reach it, the child stops gracefully once
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGTERM)
    assert sup.wait(30) == 0, sup.output()
    assert (tmp_path / f"{child}.done").exists()
    assert [(e["returncode"], e["kind"]) for e in sup.events("child_exited")] == [(0, "stopped")]


def test_a_second_term_to_the_supervisor_stops_the_children_at_once(supervise: Supervise, tmp_path: Path) -> None:
    sup, child = start(supervise, tmp_path, 30.0)
    sup.signal_group(signal.SIGTERM)
    wait_for(lambda: sup.events("stop_requested"), "the stop requested", context=sup.output)
    sup.signal(signal.SIGTERM)
    assert sup.wait(20) == 1
    assert not (tmp_path / f"{child}.done").exists()
    assert [e["returncode"] for e in sup.events("child_exited")] == [1]
    assert "hard stop: exiting without waiting for running jobs" in sup.output()


def test_a_job_longer_than_the_shutdown_timeout_is_abandoned_and_the_exit_code_says_so(
        supervise: Supervise, tmp_path: Path) -> None:
    sup, child = start(supervise, tmp_path, 30.0, "--shutdown-timeout", "1s")
    sup.signal(signal.SIGTERM)
    assert sup.wait(20) == 1
    assert not (tmp_path / f"{child}.done").exists()
    assert "1 job(s) still running after --shutdown-timeout 1s: abandoned" in sup.output()
    assert "error: child 0" in sup.output()
    assert "exit code 1 (stopped without its running jobs) while stopping" in sup.output()

