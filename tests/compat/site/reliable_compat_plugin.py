"""pytest plugin for running Dramatiq's own test suite with reliable installed.

- Each test gets a fresh, migrated store (`RELIABLE_COMPAT_STORE` = sqlite | postgresql), whose URL
  the broker patch reads when a broker is built; brokers a test module builds at import share one
  store made at start-up (the `dramatiq` CLI processes those tests start use it too).
- Tests that touch the shared RabbitMQ or Redis run in one xdist group: they use fixed queue names
  and flush whole servers, so they cannot run beside each other.
- The expected differences (`RELIABLE_COMPAT_EXPECTED`, a YAML file) are marked strict xfail: a
  listed test that passes fails the run, so the list never outlives its reason.
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

STORE_KIND = "RELIABLE_COMPAT_STORE"
STORE_URL = "RELIABLE_COMPAT_STORE_URL"
IMPORT_STORE_URL = "RELIABLE_COMPAT_IMPORT_STORE_URL"
TEMPLATE = "RELIABLE_COMPAT_PG_TEMPLATE"
PG_ADMIN = "RELIABLE_COMPAT_PG_ADMIN"
EXPECTED = "RELIABLE_COMPAT_EXPECTED"
SERVICE_MODULES = {"test_rabbitmq.py", "test_redis.py", "test_cli.py", "test_pidfile.py", "test_watch.py"}
SERVICE_FIXTURES = {"rabbitmq_broker", "rabbitmq_worker", "redis_broker", "redis_worker", "redis_result_backend",
                    "redis_rate_limiter_backend", "start_cli"}


def load_expected(path: str | os.PathLike[str]) -> dict[str, dict[str, str]]:
    """The expected differences file: test id -> {reason, docs}; every entry must give both."""
    data = yaml.safe_load(Path(path).read_text()) or {}
    entries = data.get("differences") or []
    expected: dict[str, dict[str, str]] = {}
    for index, entry in enumerate(entries):
        where = f"{path}: differences[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping with test, stores, reason and docs")
        for key in ("test", "reason", "docs"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                raise ValueError(f"{where}: '{key}' is required and must be a non-empty string")
        stores = entry.get("stores", ["sqlite", "postgresql"])
        if not isinstance(stores, list) or not set(stores) <= {"sqlite", "postgresql"}:
            raise ValueError(f"{where}: 'stores' must be a list of sqlite and/or postgresql")
        if entry["test"] in expected:
            raise ValueError(f"{where}: {entry['test']} is listed twice")
        expected[entry["test"]] = {"reason": entry["reason"], "docs": entry["docs"], "stores": ",".join(stores)}
    return expected


def uses_shared_services(item: pytest.Item) -> bool:
    """Whether the test touches the shared RabbitMQ or Redis (fixed names, whole-server flushes)."""
    if Path(str(item.fspath)).name in SERVICE_MODULES:
        return True
    if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and "redis" in callspec.params.values()


class StoreFactory:
    """Fresh migrated stores for one process: SQLite files copied from a migrated template, or
    PostgreSQL databases created from a migrated template database.

    On PostgreSQL a database is created and dropped in a thread of its own, ahead of the tests
    (`AHEAD` ready at a time) and after them: CREATE DATABASE and DROP DATABASE (a checkpoint) cost
    0.3-1.5 s each on a 2-core machine, which the tests, mostly waiting on Dramatiq's timings,
    would otherwise wait for in series. Each test still gets a database no other test touched."""

    #: PostgreSQL databases kept created ahead of the tests.
    AHEAD = 2

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.directory = Path(tempfile.mkdtemp(prefix="reliable-compat-"))
        self._template_file: Path | None = None
        self._databases: list[str] = []
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._slots = threading.Semaphore(self.AHEAD)  # one per database to make ahead
        self._retired: queue.Queue[str | None] = queue.Queue()
        self._stopping = False
        self._threads: list[threading.Thread] = []

    def new(self) -> str:
        """A new empty store's URL."""
        name = f"c{uuid.uuid4().hex[:12]}"
        if self.kind == "sqlite":
            if self._template_file is None:
                from reliable.store import StateStore

                self._template_file = self.directory / "template.db"
                store = StateStore(f"sqlite:///{self._template_file}")
                store.upgrade()
                store.close()
            target = self.directory / f"{name}.db"
            shutil.copyfile(self._template_file, target)
            return f"sqlite:///{target}"
        if not self._threads:
            self._threads = [threading.Thread(target=work, name=f"compat-{work.__name__}", daemon=True)
                             for work in (self._make, self._drop)]
            for thread in self._threads:
                thread.start()
        made = self._ready.get(timeout=120)
        if isinstance(made, BaseException):
            raise made
        self._slots.release()  # one taken: make the next
        return os.environ[PG_ADMIN].rsplit("/", 1)[0] + f"/{made}"

    def drop(self, url: str) -> None:
        """Remove a store made by `new` (PostgreSQL databases, in the background; SQLite files go
        with the directory)."""
        if self.kind == "postgresql":
            self._retired.put(url.rsplit("/", 1)[1])

    def close(self) -> None:
        """Drop what is left (made ahead, or retired and not yet dropped) and delete the directory."""
        self._stopping = True
        self._slots.release()
        self._retired.put(None)
        for thread in self._threads:
            thread.join(timeout=120)
        for name in list(self._databases):
            self._execute(os.environ[PG_ADMIN], f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._databases.clear()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _make(self) -> None:
        """Keep AHEAD databases made from the template, until `close`."""
        admin, template = os.environ[PG_ADMIN], os.environ[TEMPLATE]
        while True:
            self._slots.acquire()
            if self._stopping:
                return
            name = f"c{uuid.uuid4().hex[:12]}"
            try:
                self._execute(admin, f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
            except BaseException as error:  # the waiting test reports it
                self._ready.put(error)
                return
            self._databases.append(name)
            self._ready.put(name)

    def _drop(self) -> None:
        """Drop the databases the tests are done with, until `close` (None)."""
        admin = os.environ[PG_ADMIN]
        while (retired := self._retired.get()) is not None:
            try:
                self._execute(admin, f'DROP DATABASE IF EXISTS "{retired}" WITH (FORCE)')
                self._databases.remove(retired)
            except Exception:  # left for close(), which drops what remains
                pass

    @staticmethod
    def _execute(admin_url: str, statement: str) -> None:
        from sqlalchemy import create_engine, text
        from sqlalchemy.exc import OperationalError

        engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    with engine.connect() as conn:
                        conn.execute(text(statement))
                    return
                except OperationalError as error:  # another worker is copying the same template
                    if "being accessed by other users" not in str(error) or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        finally:
            engine.dispose()


_factory: StoreFactory | None = None
_expected: dict[str, dict[str, str]] = {}


def pytest_configure(config: pytest.Config) -> None:
    global _factory, _expected
    kind = os.environ.get(STORE_KIND)
    if kind:
        if kind not in ("sqlite", "postgresql"):
            raise pytest.UsageError(f"{STORE_KIND} must be sqlite or postgresql, not {kind!r}")
        _factory = StoreFactory(kind)
        url = _factory.new()
        os.environ[IMPORT_STORE_URL] = url
        os.environ[STORE_URL] = url
        check_installed()
    if os.environ.get(EXPECTED) and kind:
        _expected = {test: entry for test, entry in load_expected(os.environ[EXPECTED]).items()
                     if kind in entry["stores"].split(",")}


def check_installed() -> None:
    """Refuse to run "with reliable" when the broker patch did not load (sitecustomize errors are
    only printed by Python's site module, and the run would test plain Dramatiq)."""
    import reliable_compat_patch
    from dramatiq.brokers.stub import StubBroker

    from reliable.middleware import ReliableMiddleware

    broker = StubBroker()
    try:
        if not reliable_compat_patch._applied or not any(isinstance(m, ReliableMiddleware) for m in broker.middleware):
            raise pytest.UsageError("the compatibility run's broker patch is not active (is tests/compat/site on "
                                    "PYTHONPATH, and did sitecustomize load?): these would be plain Dramatiq runs")
    finally:
        broker.close()


def pytest_unconfigure(config: pytest.Config) -> None:
    if _factory is not None:
        _factory.close()


def _short_id(item: pytest.Item) -> str:
    """`test_module.py::test_name[param]`, the form the expected-differences file uses."""
    return item.nodeid.split("tests/", 1)[-1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if uses_shared_services(item):
            item.add_marker(pytest.mark.xdist_group("shared-services"))
        entry = _expected.get(_short_id(item)) or _expected.get(_short_id(item).split("[", 1)[0])
        if entry is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=f"expected difference: {entry['reason']}"))


def pytest_collection_finish(session: pytest.Session) -> None:
    """An expected difference whose module ran but whose test is gone (renamed upstream) is an error."""
    collected = {_short_id(item) for item in session.items}
    collected |= {test.split("[", 1)[0] for test in collected}
    modules = {test.split("::", 1)[0] for test in collected}
    stale = [test for test in _expected if test.split("::", 1)[0] in modules and test not in collected]
    if stale and not session.config.getoption("keyword") and not session.config.getoption("markexpr"):
        raise pytest.UsageError(f"{os.environ[EXPECTED]} lists tests this Dramatiq version does not have: "
                                f"{', '.join(sorted(stale))}")


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    if _factory is not None:
        os.environ[STORE_URL] = _factory.new()
    yield


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Any) -> Iterator[None]:
    yield
    if _factory is not None:
        url = os.environ.get(STORE_URL, "")
        if url and url != os.environ.get(IMPORT_STORE_URL):
            _factory.drop(url)
        os.environ[STORE_URL] = os.environ[IMPORT_STORE_URL]
