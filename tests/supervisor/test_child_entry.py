"""The worker child's entry point runs without Python's RuntimeWarning about a module executed twice."""

from __future__ import annotations

import subprocess
import sys

from reliable.supervisor.supervisor import CHILD_MODULE

TWICE = "found in sys.modules after import of package"


def _start(module: str) -> str:
    # An empty config: the child fails at once (no app), after Python has run the module.
    done = subprocess.run([sys.executable, "-m", module, "{}"], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    return done.stderr


def test_the_supervisor_starts_children_through_an_entry_point_python_does_not_warn_about() -> None:
    stderr = _start(CHILD_MODULE)
    assert "RuntimeWarning" not in stderr and TWICE not in stderr, stderr
    assert "ChildConfig" in stderr  # the child's own code ran (and refused the empty config)


def test_running_the_child_module_itself_would_warn() -> None:
    assert TWICE in _start("reliable.supervisor.child")
