"""A PostgreSQL store's connections carry TCP keepalives and a user timeout derived from the lease
TTL (the URL's own values win), so the kernel ends a connection on a dead path within a third of a
TTL even where no call's deadline is armed."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from reliable.deadlines import within
from reliable.errors import ConfigError
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.store.engine import connect_engine, tcp_bounds
from reliable.store.writes import transition_write

from support import wait_for


def _parameters(url: str, **kwargs: Any) -> dict[str, str]:
    engine = connect_engine(url, max_connections=1, **kwargs)
    try:
        with engine.connect() as conn:
            return dict(conn.connection.driver_connection.info.get_parameters())
    finally:
        engine.dispose()


def test_tcp_bounds_are_a_third_of_the_lease_ttl() -> None:
    assert tcp_bounds(30.0) == {"keepalives": 1, "keepalives_idle": 5, "keepalives_interval": 2,
                                "keepalives_count": 3, "tcp_user_timeout": 10_000}
    assert tcp_bounds(6.0)["tcp_user_timeout"] == 3_000  # never below 3 s


def test_connections_carry_them_and_the_url_overrides_them(pg_database: str) -> None:
    given = _parameters(pg_database, lease_ttl=60.0)
    assert (given["keepalives"], given["keepalives_idle"], given["tcp_user_timeout"]) == ("1", "10", "20000")
    overridden = _parameters(f"{pg_database}?keepalives_idle=7&tcp_user_timeout=4000")
    assert (overridden["keepalives_idle"], overridden["tcp_user_timeout"]) == ("7", "4000")


@pytest.mark.parametrize(("query", "expected"), [
    ("tcp_user_timeout=abc", r"tcp_user_timeout='abc' must be a whole number of at least 0 \(milliseconds\)"),
    ("keepalives_idle=-5", r"keepalives_idle='-5' must be a whole number of at least 1 \(seconds\)"),
    ("keepalives=yes", r"keepalives='yes' must be 0 or 1"),
    ("keepalives_count=0", r"keepalives_count='0' must be a whole number of at least 1"),
])
def test_a_tcp_setting_libpq_would_refuse_is_a_configuration_error(query: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected + r": fix it in the URL's query, or leave it out"):
        connect_engine(f"postgresql+psycopg://app:secret@db:5432/jobs?{query}")


def test_the_batches_kept_connection_outlives_the_deadline_of_the_call_that_opened_it(
        pg_store: StateStore, caplog: pytest.LogCaptureFixture) -> None:
    """The worker's batches keep one connection; opened inside a call's deadline, it was armed with
    it and cut at it under a later batch (every lease ttl, a false "silent network" warning)."""
    store = StateStore(engine=pg_store.engine, group_commit=True)
    ids = ("k1", "k2", "k3", "k4")
    store.register_many([NewJob(job_id, "q", "a", {}) for job_id in ids])
    leases = {j: store.claim(j, worker_id="w", lease_ttl=60).lease_id for j in ids}

    def succeed(*jobs: str) -> list[Any]:
        return store._sql.write_many([transition_write(j, Event.SUCCEED, lease_id=leases[j], worker_id="w")
                                      for j in jobs])

    with caplog.at_level(logging.WARNING, logger="reliable.store"), within(0.3) as until:
        assert all(succeed("k1", "k2"))  # opens the kept connection inside this call's deadline
    wait_for(lambda: time.monotonic() > until + 0.3, "the first call's deadline to pass")
    with caplog.at_level(logging.WARNING, logger="reliable.store"):
        assert all(succeed("k3", "k4"))
    assert "did not answer within a call's deadline" not in caplog.text
