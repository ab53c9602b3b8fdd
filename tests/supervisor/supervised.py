"""`reliable worker` as a real process for tests/supervisor: start it, read its events, stop it (bounded)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from support import CLI, wait_for

APPS = Path(__file__).parent / "apps"


class Supervised:
    """`reliable worker APP ...` (an app of tests/supervisor/apps) in its own process group, output to `log`."""

    def __init__(self, env: dict[str, str], log: Path, *args: str, app: str = "supervised_app") -> None:
        self.log_path = log
        self._log = log.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CLI, "worker", app, "--path", str(APPS), *args],
            env={**os.environ, **env}, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True,
        )

    def output(self) -> str:
        """What the supervisor and its children printed so far."""
        return self.log_path.read_text(errors="replace")

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The supervisor's events (JSON lines of logger reliable.worker), optionally only those called `name`."""
        found = []
        for line in self.output().splitlines():
            if line.startswith("{") and '"logger":"reliable.worker"' in line:
                event = json.loads(line)
                if name is None or event["event"] == name:
                    found.append(event)
        return found

    def ready_pids(self) -> dict[int, int]:
        """child slot -> PID of its latest child that reported ready."""
        return {e["child"]: e["pid"] for e in self.events("child_ready")}

    def wait_ready(self, count: int, timeout: float = 30.0) -> dict[int, int]:
        """Wait until `count` slots have a ready child; their PIDs by slot."""
        return wait_for(lambda: len(self.ready_pids()) >= count and self.ready_pids(), f"{count} children ready",
                        timeout=timeout, context=self.output)

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to the supervisor only (as systemd or Kubernetes would)."""
        self.proc.send_signal(sig)

    def signal_group(self, sig: signal.Signals) -> None:
        """Send `sig` to the supervisor and every child (systemd's default KillMode=control-group)."""
        os.killpg(self.proc.pid, sig)

    def wait(self, timeout: float) -> int:
        """The supervisor's exit code; fails (with its output) if it is still running after `timeout` s."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"reliable worker still running after {timeout}s\n{self.output()[-3000:]}") from None

    def close(self) -> None:
        """Kill whatever is left of the process group (children included) and close the log."""
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(20)
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            if self.proc.poll() is None:
                self.proc.wait(10)
            self._log.close()
