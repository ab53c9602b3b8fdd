"""The supervisor's loop against failures around it, in the test process with fake children (no service).

A failing metrics update or a child that cannot be spawned touches no healthy child; HUP while a
child boots still restarts one slot at a time; a child killed during a graceful stop, or one that
outlives --shutdown-timeout, changes the exit code; `children_up` counts only consuming children.
Every wait is on a condition with a deadline (`support.wait_for`).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from reliable.supervisor import EXIT_CRASH_LOOP, EXIT_KILLED, EXIT_OK, Backoff, CrashWindow, SupervisorConfig

from inprocess import Driver, FakeChildren, drive, supervisor


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie not yet reaped does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_failing_metrics_update_is_logged_and_no_child_is_touched(tmp_path: Path) -> None:
    fake = FakeChildren(tmp_path)
    failing = False

    def write_metrics() -> None:
        if failing:
            raise OSError(28, "No space left on device")

    sup, events, _ = supervisor(SupervisorConfig(app="x", processes=2, python=str(fake.python),
                                                 backoff=Backoff(initial=0.05)), on_change=write_metrics)

    def script(d: Driver) -> None:
        nonlocal failing
        ready = d.until(lambda: len(fake.steps("ready")) == 2 and fake.steps("ready"), "2 children ready")
        failing = True
        victim, other = ready[0].pid, ready[1].pid
        os.kill(victim, signal.SIGKILL)
        d.until(lambda: len(fake.steps("ready", slot=ready[0].slot)) == 2, "the killed child replaced")
        assert alive(other)
        d.signal(signal.SIGTERM)

    assert drive(sup, events, script, fake.output) == EXIT_OK
    failed = events.named("metrics_write_failed")
    assert failed and "No space left on device" in failed[0]["error"]
    assert [e["reason"] for e in events.named("child_started")] == ["boot", "boot", "crash"]


def test_a_child_that_cannot_be_spawned_is_a_crash_of_its_slot_only(tmp_path: Path) -> None:
    fake = FakeChildren(tmp_path)
    sup, events, registry = supervisor(SupervisorConfig(
        app="x", processes=2, python=str(fake.python), backoff=Backoff(initial=0.05, maximum=0.2),
        crash_loop=CrashWindow(100, 60)))

    def script(d: Driver) -> None:
        ready = d.until(lambda: len(fake.steps("ready")) == 2 and fake.steps("ready"), "2 children ready")
        fake.remove()
        os.kill(ready[0].pid, signal.SIGKILL)
        d.until(lambda: len(events.named("child_start_failed")) >= 3, "3 failed spawns of the slot")
        assert alive(ready[1].pid)
        fake.install()
        d.until(lambda: len(fake.steps("ready", slot=ready[0].slot)) == 2, "the slot running again")
        d.signal(signal.SIGTERM)

    assert drive(sup, events, script, fake.output) == EXIT_OK
    failed = events.named("child_start_failed")
    assert {e["child"] for e in failed} == {events.named("child_exited")[0]["child"]}
    assert "No such file or directory" in failed[0]["error"]
    # Each failed spawn is a crash: a backoff doubling with the streak.
    streaks = [e["streak"] for e in events.named("child_restart_scheduled")]
    assert streaks[:4] == [1, 2, 3, 4]
    assert registry.get_sample_value("reliable_worker_restarts_total", {"reason": "crash"}) == 1


def test_spawning_failing_everywhere_ends_in_a_crash_loop(tmp_path: Path) -> None:
    sup, events, _ = supervisor(SupervisorConfig(app="x", processes=2, python=str(tmp_path / "no-python"),
                                                 backoff=Backoff(initial=0.01), crash_loop=CrashWindow(4, 60)))
    assert drive(sup, events, lambda d: None) == EXIT_CRASH_LOOP
    assert sup.failure is not None and "crash loop: 4 crashes within 60s" in sup.failure
    assert "could not be started: [Errno 2] No such file or directory" in sup.failure
    assert len(events.named("child_start_failed")) == 4 and not events.named("child_started")


def test_hup_while_a_child_boots_waits_for_its_replacement_before_the_next_slot(tmp_path: Path) -> None:
    fake = FakeChildren(tmp_path, FAKE_BOOT_0="1.5", FAKE_STOP_DELAY="0.3")
    sup, events, _ = supervisor(SupervisorConfig(app="x", processes=2, python=str(fake.python)))

    def script(d: Driver) -> None:
        d.until(lambda: fake.steps("start", slot=0), "child 0 booting")
        d.signal(signal.SIGHUP)
        d.until(lambda: len(fake.steps("ready", slot=1)) == 2, "slot 1 reloaded", timeout=20)
        d.signal(signal.SIGTERM)

    assert drive(sup, events, script, fake.output) == EXIT_OK
    # The HUP reached slot 0 while its first child was booting (else this test tests nothing).
    order = [(e["event"], e.get("child")) for e in events.records]
    assert order.index(("reload_requested", None)) < order.index(("child_ready", 0))
    steps = fake.steps()
    [_, replacement0] = fake.steps("ready", slot=0)
    slot1_stopped = fake.steps("term1", slot=1)[0]
    assert steps.index(replacement0) < steps.index(slot1_stopped), fake.output()


def test_a_child_killed_during_a_graceful_stop_makes_the_exit_code_1(tmp_path: Path) -> None:
    fake = FakeChildren(tmp_path, FAKE_STOP_DELAY="inf")
    sup, events, _ = supervisor(SupervisorConfig(app="x", processes=2, python=str(fake.python)))

    def script(d: Driver) -> None:
        d.until(lambda: len(fake.steps("ready")) == 2, "2 children ready")
        d.signal(signal.SIGTERM)
        stopping = d.until(lambda: len(fake.steps("term1")) == 2 and fake.steps("term1"), "both told to stop")
        for step in stopping:  # e.g. the OOM killer, while their jobs run
            os.kill(step.pid, signal.SIGKILL)

    assert drive(sup, events, script, fake.output) == EXIT_KILLED
    assert sup.failure is not None
    assert "killed by SIGKILL while stopping: the jobs it was running were not finished" in sup.failure
    assert not fake.steps("exit")


def test_a_stop_outliving_the_shutdown_timeout_gets_the_hard_stop_then_sigkill(tmp_path: Path) -> None:
    fake = FakeChildren(tmp_path, FAKE_STOP_DELAY="inf", FAKE_IGNORE_HARD_1="1")
    sup, events, _ = supervisor(SupervisorConfig(app="x", processes=2, python=str(fake.python),
                                                 shutdown_timeout=0.3, stop_margin=0.2, kill_after=0.5))

    def script(d: Driver) -> None:
        d.until(lambda: len(fake.steps("ready")) == 2, "2 children ready")
        d.signal(signal.SIGTERM)

    assert drive(sup, events, script, fake.output) == EXIT_KILLED
    assert sorted(e["child"] for e in events.named("child_stop_timeout")) == [0, 1]
    exits = {e["child"]: e["returncode"] for e in events.named("child_exited")}
    assert exits == {0: 1, 1: -signal.SIGKILL}  # 0 obeyed the hard stop, 1 ignored it
    assert len(fake.steps("hard")) == 2 and not fake.steps("exit")


def test_children_up_counts_only_consuming_children(tmp_path: Path) -> None:
    fake = FakeChildren(tmp_path, FAKE_STOP_DELAY="inf")
    sup, events, registry = supervisor(SupervisorConfig(app="x", processes=2, python=str(fake.python),
                                                   shutdown_timeout=30))

    def up() -> float | None:
        return registry.get_sample_value("reliable_worker_children_up")

    def script(d: Driver) -> None:
        d.until(lambda: up() == 2, "2 children up")
        d.signal(signal.SIGTERM)
        d.until(lambda: up() == 0, "no child up once told to stop")
        draining = fake.steps("ready")
        assert all(alive(step.pid) for step in draining)  # still running their jobs: alive, not consuming
        d.signal(signal.SIGTERM)  # the hard stop ends the test

    assert drive(sup, events, script, fake.output) == EXIT_KILLED
