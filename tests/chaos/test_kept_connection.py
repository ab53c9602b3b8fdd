"""The group commit's kept connection under a single write (a batch of one, a failed batch's
row-by-row retry): bounded by its caller's deadline on a silent network, and replaced before use
when the server ended its session (a restart, a failover), as a pooled connection would be."""

from __future__ import annotations

import threading
import time

import pytest
from blackhole import Blackhole
from sqlalchemy import text

from reliable.deadlines import within
from reliable.errors import StoreUnavailable
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.store.writes import transition_write
from reliable.testing import wait_for

pytestmark = [pytest.mark.integration]


def test_a_lone_write_on_a_silent_network_ends_at_its_deadline(pg_store: StateStore, pg_database: str) -> None:
    proxy = Blackhole(5432)
    store = StateStore(pg_database.replace("127.0.0.1:5432", f"127.0.0.1:{proxy.port}"), group_commit=True)
    try:
        pg_store.register_many([NewJob(j, "q", "a", {}) for j in ("s-1", "s-2")])
        store.claim("s-1", worker_id="w", lease_ttl=60)  # the kept connection opened
        proxy.silence()
        outcome: list[tuple[str, float]] = []

        def lone_write() -> None:
            started = time.monotonic()
            try:
                with within(2.0):
                    store._sql.write(transition_write("s-2", Event.CLAIM, worker_id="w", attempt_id="a",
                                                      lease_ttl=60))
                outcome.append(("written", time.monotonic() - started))
            except BaseException as exc:  # recorded for the assertion
                outcome.append((type(exc).__name__, time.monotonic() - started))

        thread = threading.Thread(target=lone_write, daemon=True)
        thread.start()
        thread.join(15)
        hung = thread.is_alive()
        proxy.heal()
        thread.join(15)
        assert not hung, "the lone write was still blocked 15 s after its 2 s deadline"
        assert outcome and outcome[0][0] == StoreUnavailable.__name__, outcome
        store.record_event("s-1", "claim_refused", worker_id="w")  # the next write reconnects
    finally:
        proxy.close()
        store.close()


def test_a_lone_write_after_the_server_ended_the_sessions_succeeds(pg_store: StateStore, pg_database: str) -> None:
    store = StateStore(pg_database, group_commit=True)
    try:
        pg_store.register_many([NewJob(j, "q", "a", {}) for j in ("r-1", "r-2")])
        store.claim("r-1", worker_id="w", lease_ttl=60)  # the kept connection opened
        with pg_store.engine.connect() as conn:  # what a restart or a failover does to the sessions
            mine = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
            conn.execute(text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid()"))
            conn.commit()

            def ended() -> bool:
                conn.commit()  # pg_stat_activity is read once per transaction
                return not conn.execute(text("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                             "AND pid <> :mine AND backend_type = 'client backend'"),
                                        {"mine": mine}).scalar_one()

            wait_for(ended, timeout=10, what="the ended sessions gone")
        # A write nobody retries (the heartbeat's record of a lost lease, Heartbeat._lose).
        store.record_event("r-2", "stale_commit_rejected", worker_id="w", lease_id=1, detail={"write": "heartbeat"})
    finally:
        store.close()
