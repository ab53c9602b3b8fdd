"""`reliable docs TOPIC` opens a pager on a terminal and prints the page as it is when piped."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from reliable.cli.main import main; main()"]


def test_on_a_terminal_the_page_goes_through_the_pager(tmp_path: Path) -> None:
    paged = tmp_path / "paged.md"
    pager = tmp_path / "pager"
    pager.write_text(f"#!/bin/sh\ncat > {paged}\n")
    pager.chmod(0o755)
    env = {**os.environ, "PAGER": str(pager), "TERM": "xterm"}
    leader, follower = pty.openpty()
    try:
        done = subprocess.run([*CLI, "docs", "worker"], stdin=follower, stdout=follower, stderr=subprocess.PIPE,
                              env=env, timeout=60, check=False)
    finally:
        os.close(follower)
        os.close(leader)
    assert done.returncode == 0, done.stderr.decode()
    assert paged.read_text().rstrip("\n") == (ROOT / "docs" / "worker.md").read_text().rstrip("\n")


def test_piped_the_page_is_printed_without_a_pager(tmp_path: Path) -> None:
    pager = tmp_path / "pager"
    pager.write_text(f"#!/bin/sh\ncat > {tmp_path / 'never'}\n")
    pager.chmod(0o755)
    env = {**os.environ, "PAGER": str(pager)}
    done = subprocess.run([*CLI, "docs", "worker"], capture_output=True, env=env, timeout=60, check=True)
    assert done.stdout.decode() == (ROOT / "docs" / "worker.md").read_text()
    assert not (tmp_path / "never").exists()
