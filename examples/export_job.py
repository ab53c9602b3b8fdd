"""A long export with checkpoints: resumable, with operation keys, pausable and resumable.

Run from the repository root (RabbitMQ up; see examples/shared.py for BROKER_URL and RELIABLE_STORE):

    export RELIABLE_STORE=sqlite:///reliable.db                     # the examples' store, for the CLI
    .venv/bin/reliable db upgrade                                   # once: create ./reliable.db
    .venv/bin/dramatiq examples.export_job -p 1 -t 2                # terminal 1: a worker
    .venv/bin/python -m examples.export_job acme 300                # terminal 2: prints the job id
    .venv/bin/reliable pause JOB_ID                                 # pauses after the current page
    .venv/bin/reliable jobs show JOB_ID                             # PAUSED, checkpoint {"next_page": N, ...}
    .venv/bin/reliable resume JOB_ID --policies examples/policies/ --broker amqp://guest:guest@127.0.0.1:5672/
    .venv/bin/reliable jobs events JOB_ID                           # the whole history

How pause/resume works: `reliable pause` on a RUNNING job only sets `pause_requested` on its row.
The worker's heartbeat reads it back within one heartbeat_interval, and the next
`job.checkpoint(...)` raises JobPaused: the actor stops between two pages, the middleware moves
the job to PAUSED (`pause_observed`) and acknowledges the message. `reliable resume` moves it back
to PENDING (refused unless the contract says `resumable` and the stored checkpoint_schema equals
the actor's; the CLI reads both from --policies) and publishes the stored message again
(--broker; without it the workers' sweeper publishes it within `sweep_after`). The next claim is a
new attempt with a new lease, and the actor starts at `checkpoint_value`. Kill the worker with
`kill -9` instead: after the lease ttl the recovery loop requeues the job and it resumes the same way.

Each page is written under a name derived from its operation key, so a page redone after a crash
(the worker died between writing it and checkpointing) overwrites the same file: the side effect
is idempotent, and `record_effect` counts the replay (`reliable_duplicate_effects_total`).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import dramatiq
import reliable
from examples.shared import broker

__all__ = ["broker", "export_account"]

EXPORT_DIR = Path(os.environ.get("EXPORT_DIR", "exports"))
PAGE_SECONDS = float(os.environ.get("PAGE_SECONDS", "0.2"))  # pretend each page takes this long


def fetch_page(account_id: str, page: int) -> list[dict[str, Any]]:
    """Read one page of the account's records (pretend)."""
    time.sleep(PAGE_SECONDS)
    return [{"account": account_id, "page": page, "row": row} for row in range(10)]


def write_page(account_id: str, page: int, rows: list[dict[str, Any]], *, op_key: str) -> None:
    """Write one page atomically under a name fixed by its operation key (redoing it is harmless)."""
    target = EXPORT_DIR / account_id / f"{op_key.replace(':', '-')}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps({"op_key": op_key, "rows": rows}))
    os.replace(tmp, target)


# checkpoint_schema=2: the checkpoint is {"next_page": int, "rows": int}. (Schema 1 stored a bare
# page number.) Bump it whenever the checkpoint's shape changes: `reliable resume` then refuses
# old checkpoints instead of feeding them to new code. time_limit: Dramatiq's TimeLimit (default
# 10 minutes) still applies to tracked actors; a long export needs a longer one.
@dramatiq.actor(queue_name="exports", owner="team-data", resumable=True, checkpoint_schema=2,
                time_limit=6 * 3600 * 1000)
def export_account(account_id: str, pages: int) -> None:
    """Export `pages` pages of an account, one checkpoint per page."""
    job = reliable.current_job()
    state = job.checkpoint_value or {"next_page": 0, "rows": 0}
    for page in range(state["next_page"], pages):
        rows = fetch_page(account_id, page)
        write_page(account_id, page, rows, op_key=job.operation_key(page))
        job.record_effect(page)  # False (and counted) if an earlier attempt had written this page
        state = {"next_page": page + 1, "rows": state["rows"] + len(rows)}
        job.checkpoint(state)  # durable; raises JobPaused / JobStopped / JobCancelled when asked


if __name__ == "__main__":
    account, count = (sys.argv[1], int(sys.argv[2])) if len(sys.argv) > 2 else ("acme", 300)
    message = export_account.send(account, count)
    print(message.message_id)
