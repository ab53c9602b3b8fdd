"""The boot check against a real primary whose walsenders are not all standbys.

A synchronous standby plus pg_receivewal (how Barman streams WAL) and pg_recvlogical (a logical
decoding client, as a subscriber is): neither can be promoted, so the check must not call the
setup unsafe, and must name them as notes.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from private_postgres import PrivatePostgres, replicated_postgres

from reliable.store import StateStore
from reliable.store.replication import check_replication

from support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@contextmanager
def _client(cluster: PrivatePostgres, *argv: str) -> Iterator[subprocess.Popen[bytes]]:
    """One PostgreSQL client program of `cluster`'s version, run as the cluster's OS user; killed on exit."""
    command = [str(cluster.bindir / argv[0]), *argv[1:]]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=cluster.root)
    try:
        yield process
    finally:
        process.kill()
        process.wait(10)


def _walsenders(cluster: PrivatePostgres) -> set[str]:
    with psycopg.connect(cluster.dsn, autocommit=True, connect_timeout=5) as conn:
        rows = conn.execute("SELECT application_name FROM pg_stat_replication WHERE write_lsn IS NOT NULL").fetchall()
    return {str(row[0]) for row in rows}


@pytest.mark.timeout(120)
def test_a_wal_archiver_and_a_logical_client_do_not_make_a_synchronous_store_unsafe() -> None:
    with replicated_postgres(synchronous=True, wal_level="logical") as pair:
        url = pair.create_database("store")
        primary = pair.primary
        wal_dir = Path(primary.root) / "received-wal"
        wal_dir.mkdir()
        os.chown(wal_dir, primary.root.stat().st_uid, primary.root.stat().st_gid)
        connect = ["-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"]
        store = StateStore(url, max_connections=1)
        try:
            with _client(primary, "pg_receivewal", "-D", str(wal_dir), *connect, "--no-loop"), \
                    _client(primary, "pg_recvlogical", *connect, "-d", "store", "--slot", "audit", "--create-slot",
                            "--start", "-P", "test_decoding", "-f", "/dev/null", "-s", "1"):
                wait_for(lambda: {"pg_receivewal", "pg_recvlogical"} <= _walsenders(primary),
                         "pg_receivewal and pg_recvlogical streaming", timeout=30)
                report = check_replication(store.engine, "require_sync")
                assert report is not None
                assert report.problems == []
                assert report.standbys == (("standby1", "sync"),)
                assert sorted(kind for _, _, kind in report.others) == ["archiver", "logical"], report.others
        finally:
            store.close()
