"""The pure parts of `reliable worker`: what a child's exit means, the backoff, the crash-loop window."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from reliable.cli.main import cli
from reliable.errors import ConfigError
from reliable.supervisor import Backoff, CrashWindow, parse_crash_loop
from reliable.supervisor.exits import ExitKind, classify
from reliable.supervisor.restarts import CrashLoop


@pytest.mark.parametrize(("code", "requested", "booted", "kind", "cause"), [
    (-9, False, True, ExitKind.CRASH, "killed by SIGKILL"),
    (1, False, True, ExitKind.CRASH, "exit code 1 (stopped without its running jobs)"),
    (13, False, False, ExitKind.CRASH, "died while booting, exit code 13"),
    (3, False, False, ExitKind.CRASH, "died while booting, exit code 3 (the broker connection failed at boot)"),
    (2, False, False, ExitKind.APP_BROKEN, "exit code 2 (the app failed to import)"),
    (2, False, True, ExitKind.CRASH, "exit code 2 (the app failed to import)"),
    (0, True, True, ExitKind.STOPPED, "exit code 0 (stopped on request)"),
    (-15, True, False, ExitKind.STOPPED, "killed by SIGTERM"),
    (0, False, True, ExitKind.CRASH, "exit code 0 (stopped on request)"),
    (75, False, True, ExitKind.RECYCLE_JOBS, "exit code 75 (recycled after --max-jobs)"),
    (76, True, True, ExitKind.RECYCLE_MEMORY, "exit code 76 (recycled over --max-memory)"),
])
def test_classify(code: int, requested: bool, booted: bool, kind: ExitKind, cause: str) -> None:
    result = classify(code, requested=requested, booted=booted)
    assert (result.kind, result.returncode, result.cause) == (kind, code, cause)


def test_backoff_doubles_up_to_its_maximum() -> None:
    backoff = Backoff(initial=0.5, maximum=4.0)
    assert [backoff.delay(n) for n in range(7)] == [0.0, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert backoff.delay(10_000) == 4.0


def test_crash_loop_counts_crashes_within_a_sliding_window() -> None:
    loop = CrashLoop(CrashWindow(crashes=3, seconds=10.0))
    assert [loop.record(t) for t in (0.0, 5.0, 10.5, 16.0)] == [False, False, False, False]
    assert loop.record(17.0) is True  # 10.5, 16.0 and 17.0 are within 10 s
    assert CrashLoop(CrashWindow(2, 10.0)).record(0.0) is False
    assert CrashLoop(CrashWindow(1, 1.0)).record(0.0) is True


@pytest.mark.parametrize(("text", "window"), [("5/60", CrashWindow(5, 60.0)), ("3/1m", CrashWindow(3, 60.0)),
                                              (" 2 / 500ms ", CrashWindow(2, 0.5))])
def test_parse_crash_loop(text: str, window: CrashWindow) -> None:
    assert parse_crash_loop(text) == window


@pytest.mark.parametrize(("text", "says"), [("5", "expected K/DURATION"), ("5/5 minutes", "expected K/DURATION"),
                                            ("5/1x", "bad duration"), ("0/60s", "at least 1 crash"),
                                            ("5/0", "at least 1 crash")])
def test_a_bad_crash_loop_is_refused_with_the_forms(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_crash_loop(text)


@pytest.mark.parametrize(("args", "says"), [
    (["--crash-loop", "5"], "Invalid value for '--crash-loop': bad crash loop '5'"),
    (["--restart-backoff", "5 minutes"], "Invalid value for '--restart-backoff': bad duration"),
    (["--processes", "0"], "Invalid value for '--processes'"),
    (["--max-memory", "0"], "Invalid value for '--max-memory'"),
])
def test_bad_options_exit_2_naming_the_option(args: list[str], says: str) -> None:
    result = CliRunner().invoke(cli, ["worker", "some_app", *args])
    assert result.exit_code == 2
    assert says in result.output
