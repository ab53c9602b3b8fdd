"""Fencing tokens where the WAL timeline alone stops rising: `reliable db raise-lease-floor`.

Two cases of docs/postgresql-failover.md, on private clusters. pg_upgrade starts the new cluster
on timeline 1: a process that used timeline 2 accepts it (another cluster: a new system
identifier) and, once the floor is raised above timeline 2, claims take tokens above every earlier
one. Two lossy failovers can promote two servers to the same timeline number (the second standby
never saw the first one's .history file): the floor raised above that timeline keeps the second
promotion's tokens above the first's.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner
from private_postgres import (
    _REPLICATION_SETTINGS,
    PrivatePostgres,
    private_postgres,
    replicated_postgres,
    require_binaries,
)

from reliable.cli.main import cli
from reliable.errors import ConfigError
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.store.fencing import raise_lease_floor

from support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FLOOR2 = 1 << 40  # the first token on timeline 2


def _timeline(pg: PrivatePostgres) -> int:
    with psycopg.connect(pg.dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int8"
                           ).fetchone()
    assert row is not None
    return int(row[0])


def _replayed(primary: PrivatePostgres, *standbys: PrivatePostgres) -> None:
    with psycopg.connect(primary.dsn, autocommit=True, connect_timeout=5) as conn:
        row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
    assert row is not None
    for standby in standbys:
        with psycopg.connect(standby.dsn, autocommit=True, connect_timeout=5) as conn:
            wait_for(lambda c=conn: c.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [row[0]]).fetchone()[0],
                     f"standby on port {standby.port} replaying {row[0]}", timeout=30)


def _pg_upgrade_in_place(pg: PrivatePostgres) -> None:
    """A real pg_upgrade (same version) of `pg` into a fresh cluster, which then takes its place and port."""
    pg.stop()
    fresh = PrivatePostgres(pg.bindir, pg.settings)
    try:
        fresh.init()
        fresh._run("pg_upgrade", "-b", str(pg.bindir), "-B", str(pg.bindir), "-d", str(pg.data),
                   "-D", str(fresh.data), "-p", str(pg.port), "-P", str(fresh.port))
        shutil.move(str(pg.data), str(pg.root / "data.old"))
        shutil.move(str(fresh.data), str(pg.data))
        pg.configure()
    finally:
        fresh.remove()
    pg.start()


@pytest.mark.timeout(180)
def test_after_pg_upgrade_a_running_process_goes_on_and_the_raised_floor_keeps_tokens_rising(
        caplog: pytest.LogCaptureFixture) -> None:
    with replicated_postgres(synchronous=False) as pair:
        url = pair.create_database("store")
        store = StateStore(url, max_connections=1)
        try:
            store.upgrade()
            job_id = f"u-{uuid.uuid4().hex[:8]}"
            store.register(NewJob(job_id, "q", "a", {"args": [], "kwargs": {}}))
            pair.wait_replayed()
            pair.primary.kill()
            pair.promote()
            claim = store.claim(job_id, worker_id="w", lease_ttl=600)
            assert claim.lease_id == FLOOR2
            _pg_upgrade_in_place(pair.standby)
            assert _timeline(pair.standby) == 1
            store.engine.dispose()
            with caplog.at_level(logging.WARNING, logger="reliable.store"):
                assert store.get(job_id).lease_id == claim.lease_id
            assert "raise-lease-floor --above-timeline 2" in caplog.text
            result = CliRunner().invoke(cli, ["db", "raise-lease-floor", "--store", url, "--above-timeline", "2",
                                              "--json"])
            assert result.exit_code == 0, result.output
            assert '"after": 2199023255552' in result.output  # 2 << 40: above every token of timelines 1 and 2
        finally:
            store.close()
        restarted = StateStore(url, max_connections=1)  # new sessions read the raised floor
        try:
            restarted.finish(job_id, claim.lease_id, Event.RETRY, worker_id="w", retry_delay=0)
            again = restarted.claim(job_id, worker_id="w2", lease_ttl=600)
            assert again.lease_id == 2 << 40 > claim.lease_id
        finally:
            restarted.close()


@pytest.mark.timeout(240)
def test_a_second_lossy_failover_to_the_same_timeline_number_keeps_tokens_rising_once_the_floor_is_raised() -> None:
    bindir = require_binaries()
    settings = {**_REPLICATION_SETTINGS, "synchronous_commit": "on", "synchronous_standby_names": ""}
    p, s1, s2 = (PrivatePostgres(bindir, settings) for _ in range(3))
    try:
        p.init()
        p.start()
        p.create_database("store")
        s1.base_backup_of(p, "s1")
        s2.base_backup_of(p, "s2")
        s1.start()
        s2.start()
        url = (f"postgresql+psycopg://postgres@/store?host=127.0.0.1:{p.port}&host=127.0.0.1:{s1.port}"
               f"&host=127.0.0.1:{s2.port}&target_session_attrs=read-write")
        store = StateStore(url, max_connections=1)
        try:
            store.upgrade()
            job_id = f"j-{uuid.uuid4().hex[:8]}"
            store.register(NewJob(job_id, "q", "a", {"args": [], "kwargs": {}}))
            _replayed(p, s1, s2)
            s2.stop()
            p.kill()
            s1.promote()
            a = store.claim(job_id, worker_id="worker-a", lease_ttl=600)
            assert a.lease_id == FLOOR2
            s1.kill()  # worker-a's claim is lost with s1
            s2.start()
            s2.promote()
            assert _timeline(s2) == 2  # s2 never saw s1's 00000002.history: the same timeline number
            store.engine.dispose()
            # What docs/postgresql-failover.md asks before the workers use such a server:
            floor = raise_lease_floor(store.engine, above_timeline=2)
            assert (floor.before, floor.after, floor.timeline) == (0, 2 << 40, 2)
            store.engine.dispose()  # the workers' restart: sessions that read the new floor
            b = store.claim(job_id, worker_id="worker-b", lease_ttl=600)
            assert b.lease_id > a.lease_id
            assert b.lease_id == floor.lowest_next_token == 3 << 40
            assert raise_lease_floor(store.engine, 1).after > floor.after  # never lowered
        finally:
            store.close()
    finally:
        for cluster in (s2, s1, p):
            cluster.remove()


@pytest.mark.timeout(60)
def test_a_role_that_may_not_set_the_floor_gets_told_how_and_its_claims_use_the_floor_once_granted(
        tmp_path: Path) -> None:
    with private_postgres() as pg:
        with psycopg.connect(pg.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("CREATE ROLE app LOGIN")
            conn.execute("CREATE DATABASE appdb OWNER app")
        url = pg.url_for("appdb").replace("postgres@", "app@")
        store = StateStore(url, max_connections=1)
        try:
            store.upgrade()
            with pytest.raises(ConfigError, match=r"GRANT SET ON PARAMETER reliable\.lease_floor"):
                raise_lease_floor(store.engine, 1)
            with psycopg.connect(pg.dsn, autocommit=True, connect_timeout=5) as conn:
                conn.execute("GRANT SET ON PARAMETER reliable.lease_floor TO app")
            assert raise_lease_floor(store.engine, 1).after == 1 << 40
            store.engine.dispose()
            job_id = f"g-{uuid.uuid4().hex[:8]}"
            store.register(NewJob(job_id, "q", "a", {"args": [], "kwargs": {}}))
            assert store.claim(job_id, worker_id="w", lease_ttl=60).lease_id == 1 << 40
        finally:
            store.close()
    with pytest.raises(ConfigError, match="SQLite has no failover"):
        sqlite = StateStore(f"sqlite:///{tmp_path}/s.db")
        try:
            raise_lease_floor(sqlite.engine, 1)
        finally:
            sqlite.close()
