"""Putting jobs into each state through the store's real API (shared by the control tests)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from reliable.cli.main import cli as reliable_cli
from reliable.options import STORED_CONTRACT
from reliable.states import Event
from reliable.store import ErrorInfo, Job, NewJob, StateStore

RELIABLE = str(Path(sys.executable).parent / "reliable")
QUEUE = "exports"
ACTOR = "export"


def make(store: StateStore, job_id: str, *, queue: str = QUEUE, actor: str = ACTOR,
         schema: int | None = 2, contract: dict[str, Any] | None = None) -> Job:
    """A PENDING job; `contract`: the actor options stored with it, as the middleware does at registration."""
    options = {STORED_CONTRACT: contract} if contract else {}
    store.register(NewJob(job_id, queue, actor, {"args": [job_id], "kwargs": {}, "options": options},
                          checkpoint_schema=schema))
    return store.get(job_id)


def running(store: StateStore, job_id: str, *, checkpoint: Any = None, effects: int = 0, **kw: Any) -> Job:
    """A RUNNING job (claimed by worker w1), optionally with a checkpoint and applied side effects."""
    make(store, job_id, **kw)
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    if checkpoint is not None:
        store.save_checkpoint(job_id, claim.lease_id, checkpoint, lease_ttl=60)
    for i in range(effects):
        store.record_effect(job_id, claim.lease_id, f"unit-{i}", attempt_id=claim.attempt_id)
    return store.get(job_id)


def ended(store: StateStore, job_id: str, event: Event, **kw: Any) -> Job:
    """A job that ran once and ended with `event` (FAIL, DEAD_LETTER, NEED_REVIEW, PAUSE_OBSERVED, RETRY...)."""
    job = running(store, job_id, **kw)
    error = ErrorInfo("transient", "ConnectionError", "boom") if event is not Event.PAUSE_OBSERVED else None
    store.finish(job_id, job.lease_id, event, worker_id="w1", error=error,
                 retry_delay=600 if event is Event.RETRY else None)
    return store.get(job_id)


def paused(store: StateStore, job_id: str, *, checkpoint: Any = 3, **kw: Any) -> Job:
    """A PAUSED job with a checkpoint (paused while running, as a worker does it)."""
    return ended(store, job_id, Event.PAUSE_OBSERVED, checkpoint=checkpoint, **kw)


def cli(*args: str, store_url: str | None, env: dict[str, str] | None = None,
        check: int | None = 0) -> subprocess.CompletedProcess[str]:
    """Run the real `reliable` executable against `store_url`; assert its exit status when `check` is set."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("RELIABLE_")}
    full_env.update({"RELIABLE_OPERATOR": "carol", "COLUMNS": "200"})
    full_env.update(env or {})
    store = ["--store", store_url] if store_url is not None else []
    proc = subprocess.run([RELIABLE, *args, *store], capture_output=True, text=True, env=full_env,
                          timeout=60, stdin=subprocess.DEVNULL)
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def cli_json(*args: str, store_url: str, **kw: Any) -> Any:
    """Run `reliable ... --json` and parse stdout."""
    proc = cli(*args, "--json", store_url=store_url, **kw)
    return json.loads(proc.stdout)


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """`reliable ARGS` in this process, with no RELIABLE_* variable but `env` (the operator: carol)."""
    clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RELIABLE_")}
    return CliRunner().invoke(reliable_cli, list(args), env={**clean, "RELIABLE_OPERATOR": "carol", **(env or {})})


def via(url: str, token: str, *args: str, env: dict[str, str | None] | None = None) -> Result:
    """`reliable ARGS --api URL` with the token in the environment."""
    return run(*args, "--api", url, env={"RELIABLE_API_TOKEN": token, **(env or {})})


def check(result: Result, code: int = 0) -> Result:
    """`result`, once its exit status is `code` (else a failure showing its output)."""
    assert result.exit_code == code, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result
