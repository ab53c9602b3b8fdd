"""The private PostgreSQL harness itself: settings applied, stop/start keeps data, removed at the end."""

from __future__ import annotations

import psycopg
import pytest
from private_postgres import private_postgres

pytestmark = [pytest.mark.integration]


def test_private_cluster_starts_stops_restarts_and_is_removed() -> None:
    with private_postgres(max_connections=23) as pg:
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            assert conn.execute("SHOW max_connections").fetchone() == ("23",)
            assert conn.execute("SHOW fsync").fetchone() == ("off",)
            conn.execute("CREATE TABLE kept (n int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        pg.stop()
        assert not pg.running()
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(pg.dsn, connect_timeout=2)
        pg.start()
        with psycopg.connect(pg.dsn) as conn:
            assert conn.execute("SELECT n FROM kept").fetchone() == (7,)
        root = pg.root
    assert not root.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg.dsn, connect_timeout=2)


def test_private_cluster_is_removed_when_the_test_fails() -> None:
    with pytest.raises(ZeroDivisionError), private_postgres() as pg:
        root, dsn = pg.root, pg.dsn
        1 / 0  # noqa: B018
    assert not root.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(dsn, connect_timeout=2)
