"""Death by the kernel's evidence only (reliable.worker.liveness): the pure decision as a table, and
the evidence gathered for real, including a pid the observer may not signal (EPERM) and a stat it
may not read (EACCES, or hidden as /proc mounted hidepid=2 hides it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reliable.worker.liveness import Evidence, Liveness, observe, read_start, verdict

from support import wait_for

R = 1000  # the recorded start time

TABLE = [
    # (recorded ticks, evidence, verdict)
    (R, Evidence(exists=False), Liveness.PID_GONE),
    (None, Evidence(exists=False), Liveness.PID_GONE),  # no such process: no start time needed
    (R, Evidence(exists=True, start_ticks=R), Liveness.ALIVE),
    (R, Evidence(exists=True, start_ticks=R + 1), Liveness.PID_REUSED),
    (R, Evidence(exists=True, start_ticks=R, exited=True), Liveness.PID_GONE),  # a zombie
    (R, Evidence(exists=True, start_ticks=R + 1, exited=True), Liveness.PID_GONE),
    (None, Evidence(exists=True, start_ticks=R, exited=True), Liveness.PID_GONE),
    (R, Evidence(exists=True), Liveness.UNKNOWN),  # exists (EPERM or ours), stat unreadable: hidepid
    (None, Evidence(exists=True, start_ticks=R), Liveness.UNKNOWN),  # nothing to compare with
    (R, Evidence(exists=None), Liveness.UNKNOWN),  # kill failed otherwise
    (R, Evidence(exists=None, start_ticks=R + 1), Liveness.UNKNOWN),
]


@pytest.mark.parametrize(("recorded", "evidence", "expected"), TABLE)
def test_the_verdict_table(recorded: int | None, evidence: Evidence, expected: Liveness) -> None:
    assert verdict(recorded, evidence) is expected
    assert verdict(recorded, evidence).dead is (expected in (Liveness.PID_GONE, Liveness.PID_REUSED))


def gone_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def own_ticks() -> int:
    start = read_start(os.getpid())
    assert start is not None and start[1] is False
    return start[0]


def test_evidence_of_this_process_a_gone_one_and_a_zombie() -> None:
    mine = observe(os.getpid())
    assert mine == Evidence(exists=True, start_ticks=own_ticks())
    assert verdict(own_ticks(), mine) is Liveness.ALIVE
    assert verdict(own_ticks() + 1, mine) is Liveness.PID_REUSED
    assert observe(gone_pid()) == Evidence(exists=False)
    assert observe(0) == Evidence(exists=None) and observe(-1) == Evidence(exists=None)  # never a group
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:  # exited, not yet reaped: kill(pid, 0) still succeeds, the stat says Z
        wait_for(lambda: observe(zombie.pid).exited, "the child to exit (a zombie until reaped)")
        assert verdict(123, observe(zombie.pid)) is Liveness.PID_GONE
    finally:
        zombie.wait()


def test_a_live_pid_hidden_by_hidepid_is_unknown(tmp_path: Path) -> None:
    # /proc mounted hidepid=2 shows no /proc/<pid> of another user's process: a /proc with no entry.
    hidden = observe(os.getpid(), proc=str(tmp_path))
    assert hidden == Evidence(exists=True)
    assert verdict(own_ticks(), hidden) is Liveness.UNKNOWN


def test_kill_eperm_means_it_exists() -> None:
    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    def other(pid: int, sig: int) -> None:
        raise OSError(22, "Invalid argument")

    assert observe(os.getpid(), kill=refused) == Evidence(exists=True, start_ticks=own_ticks())
    assert observe(os.getpid(), kill=other) == Evidence(exists=None)


def as_nobody(work: Callable[[], object]) -> object:
    """`work()`'s JSON-able result, run in a forked child that dropped root for uid/gid 65534: the
    kernel then refuses it what it refuses another user (signals to root's processes, a mode 0600
    file of root's), which root itself is never refused."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to become another user")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        os.close(read)
        try:
            os.setgid(65534)
            os.setuid(65534)
        except OSError as exc:
            out = json.dumps({"cannot": repr(exc)})
        else:
            try:
                out = json.dumps({"ok": work()})
            except BaseException as exc:
                out = json.dumps({"error": repr(exc)})
        os.write(write, out.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        answer = json.loads(pipe.read() or '{"error": "no answer"}')
    os.waitpid(pid, 0)
    if "cannot" in answer:
        pytest.skip(f"cannot act as another user here: {answer['cannot']}")
    assert "error" not in answer, answer["error"]
    return answer["ok"]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory every user may enter (pytest's tmp_path is root's only)."""
    path = Path(tempfile.mkdtemp(prefix="reliable-liveness-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_another_users_process_eperm_and_an_unreadable_stat(open_dir: Path) -> None:
    me = os.getpid()
    # A copy of this process's stat in a directory anyone may enter, the file readable by root only
    # (hidepid=1 leaves /proc/<pid> visible but refuses to read it: EACCES).
    private = open_dir / "proc"
    (private / str(me)).mkdir(parents=True, mode=0o755)
    (open_dir / "empty").mkdir(mode=0o755)
    (private / str(me) / "stat").write_text(Path(f"/proc/{me}/stat").read_text())
    (private / str(me) / "stat").chmod(0o600)
    for each in (private, private / str(me), open_dir / "empty"):
        each.chmod(0o755)

    def look() -> object:
        def evidence(proc: str) -> list[object]:
            e = observe(me, proc=proc)
            return [e.exists, e.start_ticks, e.exited]

        try:
            os.kill(me, 0)
            signalled = "allowed"
        except PermissionError:
            signalled = "EPERM"
        try:
            open(private / str(me) / "stat").close()
            opened = "readable"
        except PermissionError:
            opened = "EACCES"
        return {"kill": signalled, "open": opened, "proc": evidence("/proc"), "unreadable": evidence(str(private)),
                "hidden": evidence(str(open_dir / "empty"))}

    seen = as_nobody(look)
    assert isinstance(seen, dict)
    assert seen["kill"] == "EPERM"  # the kernel's answer for another user's live process
    assert seen["open"] == "EACCES"
    assert seen["proc"] == [True, own_ticks(), False]  # /proc without hidepid: readable, alive
    assert seen["unreadable"] == [True, None, False]  # EPERM says it exists; EACCES hides its start
    assert seen["hidden"] == [True, None, False]
    assert verdict(own_ticks(), Evidence(*seen["unreadable"])) is Liveness.UNKNOWN
    assert verdict(own_ticks(), Evidence(*seen["proc"])) is Liveness.ALIVE


HIDEPID = """
import encodings.ascii, json, os, subprocess, sys, tempfile  # encodings: loaded while root may read them
from reliable.worker.liveness import observe, verdict, read_start
target, recorded = int(sys.argv[1]), int(sys.argv[2])
proc = tempfile.mkdtemp(prefix="reliable-hidepid-")
os.chmod(proc, 0o755)
mounted = subprocess.run(["mount", "-t", "proc", "-o", "hidepid=2", "proc", proc], capture_output=True, text=True)
if mounted.returncode != 0:
    print(json.dumps({"cannot": mounted.stderr.strip() or "mount failed"}))
    sys.exit(0)
os.setgid(65534)
os.setuid(65534)
other = observe(target, proc=proc)
mine = read_start(os.getpid(), proc=proc)
print(json.dumps({"other": [other.exists, other.start_ticks, other.exited],
                  "verdict": verdict(recorded, other).value, "mine_visible": mine is not None}))
"""


def test_a_real_hidepid_2_proc_hides_another_users_live_process() -> None:
    """A /proc mounted hidepid=2 (in a mount namespace of its own), read by another user: this
    process's /proc entry is invisible there, kill(pid, 0) says EPERM: unknown, not dead."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) to mount a /proc with hidepid=2")
    run = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", HIDEPID,
                          str(os.getpid()), str(own_ticks())], capture_output=True, text=True, timeout=60)
    if run.returncode != 0 and "unshare" in run.stderr:
        pytest.skip(f"cannot make a mount namespace here: {run.stderr.strip()}")
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    if "cannot" in seen:
        pytest.skip(f"cannot mount /proc with hidepid=2 here: {seen['cannot']}")
    assert seen == {"other": [True, None, False], "verdict": "unknown", "mine_visible": True}
