"""Configuration errors of the store fail at once, on every surface, with one line naming the fix.

The surfaces (SURFACES): `reliable.install()`, a producer's `.send()`, a `dramatiq` worker's boot
(the process exits non-zero), `reliable worker` (exit 2) and a CLI command (`reliable jobs list`,
exit 2). The configuration errors (CASES), each for real: on a private PostgreSQL cluster a
database that does not exist, a wrong password (the cluster asks role `app` for one), a database
without reliable's schema and one whose schema is older than the code; on SQLite the last two.
"At once" is measured in-process (install, send): well below the default send_timeout (30 s) that an
outage would wait; a process must exit on its own (one that took the error for an outage would boot
and wait for ever).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker
from private_postgres import private_postgres
from sqlalchemy import create_engine

import reliable
from reliable.errors import StoreMisconfigured
from reliable.middleware import ReliableMiddleware
from reliable.store import StateStore, migrate

pytestmark = [pytest.mark.integration]

PASSWORD = "right-pw-7"
OLDER = "0012"  # a revision before the head: the schema is older than the code
AT_ONCE = 10.0  # seconds: in-process, a configuration error must not wait like an outage (send_timeout 30 s)
#: A process must exit on its own within this (its start costs seconds on a loaded machine): one that
#: treated the error as an outage would boot and wait for ever.
PROCESS_TIMEOUT = 90.0
BIN = Path(sys.executable).parent

APP = """
import os

import dramatiq
from dramatiq.brokers.stub import StubBroker

from reliable.middleware import ReliableMiddleware

broker = StubBroker()
# Not reliable.install(): its own check would stop the import; this app reaches the worker's boot check.
broker.add_middleware(ReliableMiddleware(os.environ["FAIL_FAST_STORE"], recovery=False, metrics=False,
                                         json_logs=False))
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name="fail_fast")
def task() -> None:
    pass
"""


@dataclass(frozen=True)
class Case:
    """A misconfigured store: its URL and what the one line must say."""

    url: str
    says: tuple[str, ...]


def older(url: str) -> str:
    engine = create_engine(url)
    migrate.upgrade(engine, OLDER)
    engine.dispose()
    return url


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Case]]:
    """Every configuration error, keyed by name (PostgreSQL ones on a private cluster)."""
    tmp = tmp_path_factory.mktemp("fail_fast")
    empty_file = tmp / "empty.db"
    sqlite3.connect(empty_file).close()
    upgrade = "run `reliable db upgrade --store"
    with private_postgres() as pg:
        pg.add_password_role("app", PASSWORD)
        yield {
            "postgresql: database missing": Case(pg.url_for("no_such_db"), (
                'database "no_such_db" does not exist', "fix its name, or create it")),
            "postgresql: wrong password": Case(
                f"postgresql+psycopg://app:wrong@127.0.0.1:{pg.port}/postgres",
                ("password authentication failed", "check the user and password in the store URL")),
            "postgresql: schema missing": Case(pg.create_database("empty"), ("has no reliable", upgrade)),
            "postgresql: schema older": Case(older(pg.create_database("older")), (f"at revision {OLDER}", upgrade)),
            "sqlite: schema missing": Case(f"sqlite:///{empty_file}", ("has no reliable", upgrade)),
            "sqlite: schema older": Case(older(f"sqlite:///{tmp / 'older.db'}"), (f"at revision {OLDER}", upgrade)),
        }


def assert_one_line(text: str, case: Case) -> None:
    """Some line of `text` says everything `case` says (the fix named on that one line)."""
    lines = [line for line in text.splitlines() if all(part in line for part in case.says)]
    assert lines, f"no line says {case.says}:\n{text[-3000:]}"


# -- the surfaces ------------------------------------------------------------------------------------------

def via_install(case: Case, tmp: Path) -> None:
    broker = StubBroker()
    before = list(broker.middleware)
    with pytest.raises(StoreMisconfigured) as info:
        reliable.install(broker, store=case.url, recovery=False, metrics=False, json_logs=False)
    assert_one_line(str(info.value), case)
    assert "\n" not in str(info.value)
    assert broker.middleware == before  # nothing installed


def via_send(case: Case, tmp: Path) -> None:
    broker = StubBroker()
    middleware = ReliableMiddleware(case.url, recovery=False, metrics=False, json_logs=False)
    broker.add_middleware(middleware)
    broker.declare_queue("fail_fast")

    @dramatiq.actor(broker=broker, queue_name="fail_fast")
    def task() -> None:
        pass

    try:
        with pytest.raises(StoreMisconfigured) as info:
            task.send()
        assert_one_line(str(info.value), case)
        assert broker.queues["fail_fast"].qsize() == 0  # nothing published
    finally:
        middleware.store.close()


def app_env(case: Case, tmp: Path) -> dict[str, str]:
    (tmp / "fail_fast_app.py").write_text(APP)
    return {**os.environ, "FAIL_FAST_STORE": case.url, "PYTHONPATH": str(tmp)}


def via_dramatiq_worker(case: Case, tmp: Path) -> None:
    done = subprocess.run([str(BIN / "dramatiq"), "fail_fast_app", "-p", "1", "-t", "1", "--path", str(tmp)],
                          env=app_env(case, tmp), capture_output=True, text=True, timeout=PROCESS_TIMEOUT, check=False)
    assert done.returncode != 0, done.stderr[-3000:]
    assert "ready for action" not in done.stderr
    assert_one_line(done.stderr, case)


def via_reliable_worker(case: Case, tmp: Path) -> None:
    done = subprocess.run([str(BIN / "reliable"), "worker", "fail_fast_app", "-p", "1", "-t", "1", "-P", str(tmp)],
                          env=app_env(case, tmp), capture_output=True, text=True, timeout=PROCESS_TIMEOUT, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    assert_one_line(done.stderr, case)
    assert "configuration error" in done.stderr.splitlines()[-1]  # the supervisor's last word says why


def via_cli(case: Case, tmp: Path) -> None:
    done = subprocess.run([str(BIN / "reliable"), "jobs", "list", "--store", case.url], capture_output=True,
                          text=True, timeout=PROCESS_TIMEOUT, check=False)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("error: ")
    assert_one_line(line, case)


SURFACES: dict[str, Callable[[Case, Path], None]] = {
    "install": via_install,
    "send": via_send,
    "dramatiq worker boot": via_dramatiq_worker,
    "reliable worker": via_reliable_worker,
    "cli": via_cli,
}

IN_PROCESS = ("install", "send")

CASE_NAMES = ("postgresql: database missing", "postgresql: wrong password", "postgresql: schema missing",
              "postgresql: schema older", "sqlite: schema missing", "sqlite: schema older")


@pytest.mark.parametrize("case_name", CASE_NAMES)
@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_a_configuration_error_fails_at_once(surface: str, case_name: str, cases: dict[str, Case],
                                             tmp_path: Path) -> None:
    case = cases[case_name]
    started = time.monotonic()
    SURFACES[surface](case, tmp_path)
    elapsed = time.monotonic() - started
    if surface in IN_PROCESS:
        assert elapsed < AT_ONCE, f"{surface}, {case_name}: {elapsed:.1f}s"


def test_every_case_is_enumerated(cases: dict[str, Case]) -> None:
    assert sorted(cases) == sorted(CASE_NAMES)


def test_install_leaves_a_missing_sqlite_file_uncreated(tmp_path: Path) -> None:
    """install() checks a store it can reach without creating anything: a SQLite file that does not
    exist yet stays absent (the first send creates it, or `reliable db upgrade` does)."""
    path = tmp_path / "later.db"
    reliable.install(StubBroker(), store=f"sqlite:///{path}", recovery=False, metrics=False, json_logs=False)
    assert not path.exists()


def test_install_with_an_unreachable_store_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """An outage at install is not a configuration error: install() logs it and returns."""
    from support import free_port

    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/postgres"
    middleware = reliable.install(StubBroker(), store=url, recovery=False, metrics=False, json_logs=False)
    assert "cannot be reached now" in caplog.text
    middleware.store.close()


def test_a_migrated_store_passes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ok.db'}"
    StateStore(url).upgrade()
    middleware = reliable.install(StubBroker(), store=url, recovery=False, metrics=False, json_logs=False)
    middleware.store.close()


def test_a_worker_on_a_sqlite_file_that_does_not_exist_stops_at_boot(tmp_path: Path) -> None:
    """A worker cannot work without the schema: a SQLite path that names no file (a typo, a store not
    migrated yet) stops its boot with the command to run, and the file is not created. (A producer's
    install goes on: test_install_leaves_a_missing_sqlite_file_uncreated.)"""
    path = tmp_path / "typo.db"
    case = Case(f"sqlite:///{path}", ("has no reliable", "does not exist", "run `reliable db upgrade --store"))
    via_dramatiq_worker(case, tmp_path)
    assert not path.exists()
