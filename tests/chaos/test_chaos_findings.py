"""Regression tests for what the chaos suite found in reliable (see docs/chaos.md, "Findings")."""

from __future__ import annotations

from typing import Any, cast

import dramatiq
import pytest

from reliable.middleware import ReliableMiddleware
from reliable.states import JobStatus
from reliable.store import NewJob, StateStore
from reliable.worker.context import JobContext

pytestmark = pytest.mark.chaos


def test_heartbeat_after_own_success_is_not_a_stale_commit(sqlite_url: str) -> None:
    """The chaos runs saw ~1 job in 20-30 get a spurious stale_commit_rejected (write=heartbeat) right
    after its own `succeed`: a heartbeat pass took its snapshot while the job ran, the attempt finished,
    and only then did the renewal reach the database. Fixed in 69cac6a; this replays that interleaving
    through the real middleware."""
    store = StateStore(sqlite_url)
    middleware = ReliableMiddleware(store, lease_ttl=2.0, heartbeat_interval=0.5, recovery=False,
                                    metrics=False, json_logs=False)
    try:
        store.register(NewJob("job-1", "q", "units", {}))
        claim = store.claim("job-1", worker_id=middleware.worker_id, lease_ttl=2.0)
        context = JobContext(store, claim, middleware.contract_for("units", "q"), middleware.worker_id, 2.0)
        heartbeat = middleware._heartbeat
        assert heartbeat is not None
        middleware.delivery.context = context  # what the claim hook does (per worker thread)
        heartbeat.add(context)
        context.enter()

        message = dramatiq.Message(queue_name="q", actor_name="units", args=(), kwargs={}, options={},
                                   message_id="job-1")
        real_renew = store.renew

        def renew_after_the_attempt_ended(*args: Any, **kwargs: Any) -> Any:
            # The heartbeat holds its snapshot; the actor returns and its after-hook runs to the end.
            middleware.after_process_message(cast(Any, None), message)
            return real_renew(*args, **kwargs)

        store.renew = renew_after_the_attempt_ended  # type: ignore[method-assign]
        heartbeat.beat()

        assert store.get("job-1").status is JobStatus.SUCCEEDED
        events = [e.event for e in store.events("job-1")]
        assert "stale_commit_rejected" not in events, events
    finally:
        store.close()
