"""The host's instance id per boot (reliable.worker.host_instance): one per host and boot, agreed by
every process, different on a clone (which writes its own after the restore)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from reliable.worker.host_instance import host_instance, instance_path
from reliable.worker.processes import boot_id, this_process

BOOT = "0c1f3a52-1111-2222-3333-444455556666"

ASK = ("import sys; from reliable.worker.host_instance import host_instance; "
       "print(host_instance(sys.argv[1], sys.argv[2]))")


def test_created_once_mode_0644_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        first = host_instance(BOOT, str(tmp_path))
    finally:
        os.umask(old)
    assert first is not None and len(first) == 32
    path = Path(instance_path(BOOT, str(tmp_path)))
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert host_instance(BOOT, str(tmp_path)) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no temporary file left behind
    # Another boot (after a reboot, with a /tmp kept on disk): another id.
    assert host_instance("another-boot", str(tmp_path)) not in (None, first)


def test_processes_racing_to_create_it_agree(tmp_path: Path) -> None:
    racers = [subprocess.Popen([sys.executable, "-c", ASK, BOOT, str(tmp_path)], stdout=subprocess.PIPE, text=True)
              for _ in range(6)]
    answers = {racer.communicate(timeout=60)[0].strip() for racer in racers}
    assert len(answers) == 1 and answers != {"None"}
    assert answers == {host_instance(BOOT, str(tmp_path))}


def test_a_clone_gets_its_own(tmp_path: Path) -> None:
    # Two VMs of one snapshot: same boot id, each its own temporary directory written after the restore.
    one, other = tmp_path / "one", tmp_path / "other"
    one.mkdir()
    other.mkdir()
    assert host_instance(BOOT, str(one)) != host_instance(BOOT, str(other))


@pytest.mark.parametrize("content", ["", "not-an-id", "F" * 32, "a" * 31])
def test_a_file_that_is_not_an_id_gives_none(tmp_path: Path, content: str, caplog: pytest.LogCaptureFixture) -> None:
    Path(instance_path(BOOT, str(tmp_path))).write_text(content)
    assert host_instance(BOOT, str(tmp_path)) is None
    assert "no host instance id" in caplog.text and "expire by their TTL" in caplog.text


def test_a_symlink_or_no_boot_gives_none(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("a" * 32)
    os.symlink(target, instance_path(BOOT, str(tmp_path)))
    assert host_instance(BOOT, str(tmp_path)) is None
    assert host_instance(None, str(tmp_path)) is None


def test_the_record_carries_this_hosts_instance() -> None:
    me = this_process("me", queues=None, threads=1)
    assert me.host_instance is not None and me.host_instance == host_instance(boot_id())
