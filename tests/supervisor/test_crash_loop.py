"""`reliable worker` ends on its own when restarting cannot help: a crash loop (exit 3), an app that does not import
(exit 2). Real processes; no service needed (the children die before they connect)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from supervised import Supervised


def test_a_crash_loop_stops_everything_and_exits_3_naming_the_cause(
        supervise: Callable[..., Supervised], tmp_path: Path) -> None:
    metrics_file = tmp_path / "worker.prom"
    began = time.monotonic()
    sup = supervise({"SUP_TEST_EXIT_AT_BOOT": "13"}, "-p", "2", "--crash-loop", "4/30s", "--restart-backoff", "100ms",
                    "--metrics-file", str(metrics_file))
    assert sup.wait(30) == 3
    took = time.monotonic() - began
    output = sup.output()
    assert "error: crash loop: 4 crashes within 30s; stopping every child. The last: child" in output
    assert "died while booting, exit code 13" in output
    # (A child restarted before the loop was detected may die on its own while everything stops: "stopped".)
    crashes = [e for e in sup.events("child_exited") if e["kind"] == "crash"]
    assert len(crashes) == 4 and {e["returncode"] for e in crashes} == {13}
    # Two boots, then a restart per crash but the last (a restart of the third may not have come yet).
    restarts = len([e for e in sup.events("child_started") if e["reason"] == "crash"])
    assert 2 <= restarts <= 3
    [failed] = sup.events("supervisor_failed")
    assert failed["exit_code"] == 3
    assert f'reliable_worker_restarts_total{{reason="crash"}} {restarts}.0' in metrics_file.read_text()
    print(f"\ncrash loop: 4 crashes, exit 3 after {took:.1f}s")


def test_an_app_that_does_not_import_exits_2_at_once(supervise: Callable[..., Supervised]) -> None:
    sup = supervise({"SUP_TEST_BROKEN": "1"}, "-p", "2")
    assert sup.wait(30) == 2
    output = sup.output()
    assert "ImportError: supervised_app: broken on purpose" in output
    assert "error: child" in output and "could not import the app 'supervised_app'" in output
    assert "not restarting" in output
    assert not [e for e in sup.events("child_started") if e["reason"] != "boot"]


def test_a_child_not_ready_within_the_boot_timeout_is_killed_as_a_crash(supervise: Callable[..., Supervised]) -> None:
    sup = supervise({"SUP_TEST_SLEEP_AT_BOOT": "60"}, "-p", "1", "--boot-timeout", "1s", "--crash-loop", "2/1m",
                    "--restart-backoff", "100ms")
    assert sup.wait(30) == 3
    assert [e["child"] for e in sup.events("child_boot_timeout")] == [0, 0]
    assert {e["cause"] for e in sup.events("child_exited")} == {"died while booting, killed by SIGKILL"}
