"""`reliable.__all__` is the public API: sorted, every name importable, nothing public left out
(httpx's tests/test_exported_members.py, adapted to the lazy names of `reliable.__getattr__`)."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import types

import reliable

#: The public API, pinned: adding or removing a name is a decision, made here and in the changelog.
EXPECTED = [
    "ClaimRefused", "ConfigError", "ControlRefused", "Event", "JobCancelled", "JobContext", "JobForceStopped",
    "JobIdConflict", "JobInterrupted", "JobNotFound", "JobPaused", "JobStatus", "JobStopped", "JsonFormatter",
    "LeaseLost", "Limits", "MessageRefused", "Policy", "PolicyError", "ReasonRequired", "Recovery",
    "RegistrationFailed", "ReliableError", "ReliableMiddleware", "Schedule", "ScheduleNotFound", "SendTimedOut",
    "StateStore", "StoreError", "StoreMisconfigured", "StoreNotMigrated", "StoreUnavailable", "TransitionRefused",
    "Workflow", "WorkflowEngine", "WorkflowResultUnavailable", "__version__", "current_job", "install", "node",
    "workflow",
]


def test_all_is_sorted_and_pinned() -> None:
    assert reliable.__all__ == sorted(reliable.__all__)
    assert reliable.__all__ == EXPECTED


def test_every_public_name_is_exported_and_every_export_resolves() -> None:
    public = {name for name, value in vars(reliable).items()
              if not name.startswith("_") and not isinstance(value, types.ModuleType)
              and getattr(value, "__module__", "").startswith("reliable")}
    public |= set(reliable._LAZY)
    assert public == set(reliable.__all__) - {"__version__"}
    for name in reliable.__all__:
        value = getattr(reliable, name)
        if not name.startswith("_"):
            assert value.__doc__, f"reliable.{name} has no docstring"
            assert inspect.getmodule(value) is importlib.import_module(value.__module__)


def test_import_reliable_loads_none_of_the_lazy_names() -> None:
    code = ("import sys, reliable; "
            "print(sorted(m for m in ('sqlalchemy', 'reliable.store', 'reliable.middleware') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
