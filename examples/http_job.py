"""An HTTP-calling job with httpx: pages through a partner API, honouring 429 + Retry-After.

Run from the repository root (RabbitMQ up; see examples/shared.py for the environment):

    export RELIABLE_STORE=sqlite:///reliable.db                     # the examples' store, for the CLI
    .venv/bin/reliable db upgrade                                   # once
    THROTTLE_EVERY=4 .venv/bin/python -m examples.fake_api          # terminal 1: every 4th request is a 429
    .venv/bin/dramatiq examples.http_job -p 1 -t 2                  # terminal 2: a worker
    .venv/bin/python -m examples.http_job acme                      # terminal 3: prints the job id
    .venv/bin/reliable jobs events JOB_ID                           # retry_scheduled (rate_limited) ... succeed

The job lets `response.raise_for_status()` raise `httpx.HTTPStatusError`; the policy classifies it
(policies/examples/http_api.yaml, linked from examples/policies/), nothing here catches errors:

- 429 or 503 -> `rate_limited`: the job waits the Retry-After (capped at `rate_limit.max_wait`,
  15m there) in RETRY_WAIT and tries again. Rate-limited retries do not count toward max_attempts;
  past `rate_limit.max_retries` (30) the job is DEAD; from the `alert_after`-th (3) each decision
  carries an alert.
- 401/403 -> `authorization`: STOPPED and an alert for the owner. 400/422 -> FAILED at once.
- 5xx, timeouts and network errors -> `transient`: exponential backoff with jitter.

    .venv/bin/reliable policy explain examples/policies/ --exception httpx.HTTPStatusError --status 429 --retry-after 30

The actor `sync_contacts` is resumable with checkpoint_schema 1 in that policy: the checkpoint is
the API cursor, so the attempt after a 429 continues from the page that was refused, not from the
first page. Each page is upserted under its operation key, so a page redone after a crash is a
no-op.
"""

from __future__ import annotations

import sys
from typing import Any

import dramatiq
import reliable
from examples import shared
from examples.shared import broker

__all__ = ["CONTACTS", "broker", "sync_contacts"]

CONTACTS: dict[str, dict[str, Any]] = {}  # stands for your database table, keyed by contact id


def upsert_contacts(contacts: list[dict[str, Any]], *, op_key: str) -> None:
    """Write a page of contacts (an upsert: writing it twice changes nothing)."""
    for contact in contacts:
        CONTACTS[contact["id"]] = {**contact, "op_key": op_key}


@dramatiq.actor(queue_name="integrations")
def sync_contacts(account_id: str) -> None:
    """Copy every page of the account's contacts from the partner API."""
    job = reliable.current_job()
    cursor: int = job.checkpoint_value or 0  # the page to fetch next
    while True:
        response = shared.client.get("/contacts", params={"account": account_id, "cursor": cursor})
        response.raise_for_status()  # a 429 ends this attempt; the policy schedules the next one
        page = response.json()
        upsert_contacts(page["contacts"], op_key=job.operation_key(cursor))
        job.record_effect(cursor)
        if page["next"] is None:
            return
        cursor = page["next"]
        job.checkpoint(cursor)


if __name__ == "__main__":
    print(sync_contacts.send(sys.argv[1] if len(sys.argv) > 1 else "acme").message_id)
