"""Worker process records, and the leases of a process certainly dead released at once
(reliable.worker.processes): a gone or reused pid on this host and boot, never a live one."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import JobStatus
from reliable.store import NewJob, StateStore
from reliable.store.processes import WorkerProcess, list_processes, register_process
from reliable.worker.liveness import Evidence, observe
from reliable.worker.processes import boot_id, death_of, pid_space, release_dead_neighbours, start_ticks, this_process

from support import wait_for

IDEMPOTENT = {"idempotent": True, "resumable": True}
UNSAFE = {"idempotent": False}


def recovery(store: StateStore) -> Recovery:
    """Recovery without a broker; actor "safe" is idempotent, "unsafe" is not."""
    return Recovery(store, None, Policy.load(None),
                    actor_options=lambda actor: IDEMPOTENT if actor == "safe" else UNSAFE)


def held_by(store: StateStore, worker_id: str, job_id: str, actor: str = "safe") -> None:
    store.register(NewJob(job_id, queue="q", actor=actor, message={"args": []}))
    claim = store.claim(job_id, worker_id=worker_id, lease_ttl=300)
    store.save_checkpoint(job_id, claim.lease_id, 3, lease_ttl=300)


def record(worker_id: str, pid: int, ticks: int | None, **kw: Any) -> WorkerProcess:
    return replace(this_process(worker_id, queues=["q"], threads=4), pid=pid, start_ticks=ticks, **kw)


def gone_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_start_ticks_and_boot_id_read_proc() -> None:
    assert start_ticks(os.getpid()) is not None and start_ticks(os.getpid()) == start_ticks(os.getpid())
    assert start_ticks(gone_pid()) is None
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])
    try:  # exited, not yet reaped: dead for certain
        wait_for(lambda: start_ticks(zombie.pid) is None, "the child to exit (a zombie until reaped)")
    finally:
        zombie.wait()
    assert boot_id() is not None and len(boot_id() or "") == 36


RECORD_AND_WAIT = """
import dataclasses, json, sys
from reliable.worker.processes import this_process
print(json.dumps(dataclasses.asdict(this_process("contained", queues=["q"], threads=1))), flush=True)
sys.stdin.read()  # alive until the test closes stdin
"""


@contextmanager
def in_another_pid_namespace(*, mount_proc: bool = True) -> Iterator[WorkerProcess]:
    """The record of a live process in a new pid namespace on this host (same host name and boot
    id: two containers on one host), alive until the block ends."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) to start a process in another pid namespace")
    command = ["unshare", "--pid", "--fork", *(["--mount-proc"] if mount_proc else []), sys.executable, "-c",
               RECORD_AND_WAIT]
    if os.geteuid() != 0:
        command[1:1] = ["--user", "--map-root-user"]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    assert child.stdin is not None and child.stdout is not None
    try:
        line = child.stdout.readline()
        if not line:
            child.wait(timeout=10)
            assert child.stderr is not None
            pytest.skip(f"cannot start a process in another pid namespace: {child.stderr.read().strip()}")
        fields = json.loads(line)
        fields["queues"] = tuple(fields["queues"])
        yield WorkerProcess(**fields)
    finally:
        child.stdin.close()
        child.wait(timeout=10)


def test_a_live_process_of_another_pid_namespace_is_never_presumed_dead(store: StateStore) -> None:
    me = this_process("me", queues=["q"], threads=4)
    assert me.boot_id is not None and me.boot_id.startswith(f"{boot_id()}/")
    with in_another_pid_namespace() as contained:
        # Same host name and kernel boot, but its pid (1 or 2 there) is another process here, or none.
        assert contained.host == me.host and contained.pid != os.getpid()
        assert contained.boot_id is not None and contained.boot_id != me.boot_id
        assert death_of(contained, me) is None
        register_process(store, contained)
        held_by(store, "contained", "j-contained")
        assert release_dead_neighbours(store, recovery(store), me) == {}
        assert store.get("j-contained").status is JobStatus.RUNNING
        [still] = [p for p in list_processes(store) if p.worker_id == "contained"]
        assert still.live


def test_no_pid_space_when_proc_is_another_namespace() -> None:
    # unshare --pid without --mount-proc: /proc shows the parent namespace's pids, not this one's.
    with in_another_pid_namespace(mount_proc=False) as confused:
        assert confused.boot_id is None
    assert pid_space() is not None


def test_death_is_only_certain_on_this_host_and_boot() -> None:
    me = this_process("me", queues=None, threads=1)
    assert me.host_instance is not None
    alive = record("a", os.getppid(), start_ticks(os.getppid()))
    assert death_of(alive, me) is None
    assert death_of(replace(alive, start_ticks=(alive.start_ticks or 0) + 1), me) == "pid_reused"
    assert death_of(replace(alive, pid=gone_pid()), me) == "pid_gone"
    dead = replace(alive, pid=gone_pid())
    assert death_of(replace(dead, host="elsewhere"), me) is None
    assert death_of(replace(dead, boot_id="another-boot"), me) is None
    assert death_of(replace(dead, host_instance="0" * 32), me) is None  # a clone of this host
    assert death_of(replace(dead, host_instance=None), me) is None  # recorded before migration 0022
    assert death_of(dead, replace(me, boot_id=None)) is None
    assert death_of(dead, replace(me, host_instance=None)) is None
    # Its pid is gone: no start time is needed to know it.
    assert death_of(replace(dead, start_ticks=None), me) == "pid_gone"
    # Alive but unreadable here (another user's, /proc hidepid): unknown, never presumed dead.
    assert death_of(alive, me, probe=lambda pid: Evidence(exists=True)) is None


def test_dead_neighbours_leases_are_released_live_ones_kept(store: StateStore) -> None:
    me = this_process("me", queues=["q"], threads=4)
    register_process(store, me)
    gone = record("gone", gone_pid(), 12345)
    # pid reuse: a record naming a live pid (this test's) with another start time
    reused = record("reused", os.getpid(), (start_ticks(os.getpid()) or 0) + 7)
    alive = record("alive", os.getppid(), start_ticks(os.getppid()))  # e.g. frozen: alive, never presumed dead
    remote = record("remote", gone_pid(), 12345, host=f"not-{socket.gethostname()}")
    for each in (gone, reused, alive, remote):
        register_process(store, each)
    held_by(store, "gone", "j-gone")
    held_by(store, "gone", "j-gone-unsafe", actor="unsafe")
    held_by(store, "reused", "j-reused")
    held_by(store, "alive", "j-alive")
    held_by(store, "remote", "j-remote")

    released = release_dead_neighbours(store, recovery(store), me)

    assert {k: sorted(v) for k, v in released.items()} == {"gone": ["j-gone", "j-gone-unsafe"],
                                                           "reused": ["j-reused"]}
    assert store.get("j-gone").status is JobStatus.PENDING and store.get("j-gone").checkpoint == 3
    # A non-idempotent job goes to review, as a lease expiry sends it.
    assert store.get("j-gone-unsafe").status is JobStatus.REVIEW
    assert store.get("j-reused").status is JobStatus.PENDING
    assert store.get("j-alive").status is JobStatus.RUNNING and store.get("j-remote").status is JobStatus.RUNNING
    [event] = store.events("j-reused", events=["lease_expired"])
    assert event.detail is not None
    assert event.detail["holder_dead"] == "pid_reused" and event.detail["observed_by"] == "me"
    assert event.detail["expired_worker"] == "reused"
    [review] = store.events("j-gone-unsafe", events=["lease_expired_review"])
    assert review.detail is not None and review.detail["holder_dead"] == "pid_gone"
    rows = {p.worker_id: p for p in list_processes(store)}
    assert (rows["gone"].exit_reason, rows["gone"].exit_observed_by) == ("pid_gone", "me")
    assert rows["reused"].exit_reason == "pid_reused"
    assert rows["alive"].live and rows["remote"].live and rows["me"].live
    # Seen once: a second look (another process's, or the next pass) releases nothing more.
    assert release_dead_neighbours(store, recovery(store), me) == {}


def test_heartbeat_stamps_the_record_in_the_renewal(store: StateStore) -> None:
    me = this_process("me", queues=None, threads=2)
    register_process(store, me)
    held_by(store, "me", "j1")
    [before] = list_processes(store)
    job = store.get("j1")
    assert store.renew("me", [("j1", job.lease_id)], 300)
    [after] = list_processes(store)
    assert after.last_beat_at >= before.last_beat_at and after.queues is None and after.threads == 2
    store.process_beat("me")
    [idle] = list_processes(store)
    assert idle.last_beat_at >= after.last_beat_at


def test_workers_list_and_the_live_processes_gauge(store: StateStore, store_url: str) -> None:
    import json

    from click.testing import CliRunner

    from reliable.cli.main import cli
    from reliable.collector import StoreCollector
    from reliable.store.processes import mark_exited

    register_process(store, record("w-a", os.getpid(), start_ticks(os.getpid())))
    register_process(store, replace(record("w-b", os.getpid(), 1), queues=("q", "r")))
    register_process(store, record("w-gone", os.getpid(), 2))
    assert mark_exited(store, "w-gone", reason="pid_gone", observed_by="w-a")
    shown = CliRunner().invoke(cli, ["workers", "list", "--store", store_url, "--json"])
    assert shown.exit_code == 0, shown.output
    assert sorted(p["worker_id"] for p in json.loads(shown.output)) == ["w-a", "w-b"]
    every = CliRunner().invoke(cli, ["workers", "list", "--store", store_url, "--all"])
    assert every.exit_code == 0 and "w-gone" in every.output and "pid_gone" in every.output
    host = socket.gethostname()
    samples = {(s.labels["host"], s.labels["queue"]): s.value
               for family in StoreCollector(store).collect() if family.name == "reliable_worker_processes"
               for s in family.samples}
    assert samples == {(host, "q"): 2, (host, "r"): 1}


def test_records_exited_long_ago_are_pruned(store: StateStore) -> None:
    from reliable.store.processes import mark_exited, prune_exited

    register_process(store, record("old", os.getpid(), 1))
    register_process(store, record("recent", os.getpid(), 2))
    assert mark_exited(store, "old", reason="stopped", observed_by="old")
    assert mark_exited(store, "recent", reason="stopped", observed_by="recent")
    assert prune_exited(store, older_than=3600) == 0
    assert prune_exited(store, older_than=-1) == 2  # "exited before an hour from now": both
    assert list_processes(store) == []


def test_a_clone_with_the_same_host_name_and_boot_is_not_judged(store: StateStore) -> None:
    """VMs restored from one memory snapshot share host name and boot id: a process of the other
    clone (another host instance id) keeps its leases though its pid is gone here."""
    me = this_process("me", queues=["q"], threads=4)
    register_process(store, me)
    clone = record("clone", gone_pid(), 12345, host_instance="f" * 32)
    assert (clone.host, clone.boot_id) == (me.host, me.boot_id) and clone.host_instance != me.host_instance
    legacy = record("legacy", gone_pid(), 12345, host_instance=None)  # written before migration 0022
    for each in (clone, legacy):
        register_process(store, each)
        held_by(store, each.worker_id, f"j-{each.worker_id}")
    assert release_dead_neighbours(store, recovery(store), me) == {}
    assert store.get("j-clone").status is JobStatus.RUNNING and store.get("j-legacy").status is JobStatus.RUNNING
    rows = {p.worker_id: p for p in list_processes(store)}
    assert rows["clone"].live and rows["clone"].host_instance == "f" * 32 and rows["legacy"].live
    # The same record on this instance is judged: its pid is gone.
    register_process(store, replace(clone, worker_id="twin", host_instance=me.host_instance))
    held_by(store, "twin", "j-twin")
    assert release_dead_neighbours(store, recovery(store), me) == {"twin": ["j-twin"]}


def test_a_process_this_observer_cannot_see_keeps_its_leases(store: StateStore, tmp_path: Path) -> None:
    """Another user's live worker, its /proc/<pid> hidden (hidepid=2): kill(pid, 0) says EPERM or
    succeeds, its start time cannot be read: unknown, so its leases run their TTL."""
    me = this_process("me", queues=["q"], threads=4)
    register_process(store, me)
    hidden = record("hidden", os.getppid(), start_ticks(os.getppid()))
    register_process(store, hidden)
    held_by(store, "hidden", "j-hidden")

    def refused(pid: int, sig: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    for probe in (partial(observe, proc=str(tmp_path)), partial(observe, proc=str(tmp_path), kill=refused)):
        assert release_dead_neighbours(store, recovery(store), me, probe=probe) == {}
    assert store.get("j-hidden").status is JobStatus.RUNNING
    [row] = [p for p in list_processes(store) if p.worker_id == "hidden"]
    assert row.live and row.exit_reason is None
    # Once gone (the kernel says no such process), it is dead whatever /proc shows.
    register_process(store, replace(hidden, pid=gone_pid()))
    assert release_dead_neighbours(store, recovery(store), me, probe=partial(observe, proc=str(tmp_path))) \
        == {"hidden": ["j-hidden"]}
