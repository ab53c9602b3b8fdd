"""The compatibility harness' own pieces: the expected-differences file, the broker patch, the
test-tree extraction and the per-test stores (Dramatiq's suite itself runs through run.py)."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dramatiq
import pytest
from dramatiq.brokers.stub import StubBroker

from reliable.middleware import ReliableMiddleware
from reliable.store import StateStore

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "site"))
sys.path.insert(0, str(HERE))

import reliable_compat_patch as patch  # noqa: E402
import reliable_compat_plugin as plugin  # noqa: E402
import run  # noqa: E402


def test_the_shipped_expected_differences_file_loads_and_gives_a_reason_and_docs_for_each() -> None:
    expected = plugin.load_expected(HERE / "expected_differences.yaml")
    assert expected, "the file lists at least the middleware=[] difference"
    root = HERE.parents[1]
    for test, entry in expected.items():
        assert "::" in test
        page = entry["docs"].split("#", 1)[0]
        assert (root / page).is_file(), f"{test}: docs page {page} does not exist"


@pytest.mark.parametrize(("text", "message"), [
    ("differences: [42]", "differences[0]: expected a mapping"),
    ("differences:\n  - test: a.py::t\n    docs: d.md\n", "differences[0]: 'reason' is required"),
    ("differences:\n  - test: a.py::t\n    reason: r\n    docs: ''\n", "differences[0]: 'docs' is required"),
    ("differences:\n  - {test: a.py::t, reason: r, docs: d.md, stores: [mysql]}\n", "'stores' must be a list"),
    ("differences:\n  - {test: a.py::t, reason: r, docs: d.md}\n  - {test: a.py::t, reason: r, docs: d.md}\n",
     "differences[1]: a.py::t is listed twice"),
])
def test_a_bad_expected_differences_file_names_the_file_and_the_entry(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "expected.yaml"
    path.write_text(text)
    with pytest.raises(ValueError) as raised:
        plugin.load_expected(path)
    assert str(path) in str(raised.value)
    assert message in str(raised.value)


def test_entries_can_be_limited_to_one_store(tmp_path: Path) -> None:
    path = tmp_path / "expected.yaml"
    path.write_text("differences:\n  - {test: a.py::t, reason: r, docs: d.md, stores: [postgresql]}\n")
    assert plugin.load_expected(path)["a.py::t"]["stores"] == "postgresql"


def _item(path: str, fixtures: tuple[str, ...] = (), params: dict[str, Any] | None = None) -> Any:
    return SimpleNamespace(fspath=path, fixturenames=fixtures,
                           callspec=SimpleNamespace(params=params) if params is not None else None)


@pytest.mark.parametrize(("item", "shared"), [
    (_item("/w/tests/test_rabbitmq.py"), True),
    (_item("/w/tests/test_cli.py"), True),
    (_item("/w/tests/test_actors.py", ("stub_broker", "stub_worker")), False),
    (_item("/w/tests/test_actors.py", ("rabbitmq_broker",)), True),
    (_item("/w/tests/test_results.py", ("result_backend",), {"result_backend": "redis"}), True),
    (_item("/w/tests/test_results.py", ("result_backend",), {"result_backend": "stub"}), False),
])
def test_tests_on_the_shared_servers_are_grouped(item: Any, shared: bool) -> None:
    assert plugin.uses_shared_services(item) is shared


def test_the_patch_installs_reliable_once_when_the_outermost_constructor_returns(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    class AppBroker(StubBroker):  # a subclass whose constructor calls its base's
        def __init__(self) -> None:
            super().__init__()
            self.built = True

    patch._wrap(AppBroker)
    monkeypatch.setenv(patch.STORE_URL, sqlite_url)
    broker = AppBroker()
    installed = [m for m in broker.middleware if isinstance(m, ReliableMiddleware)]
    assert len(installed) == 1
    assert broker.built and broker.reliable_compat_store_url == sqlite_url
    assert not [m for m in StubBroker().middleware if isinstance(m, ReliableMiddleware)], "only AppBroker is wrapped"
    broker.close()


def test_the_patch_refuses_to_build_a_broker_without_a_store(monkeypatch: pytest.MonkeyPatch) -> None:
    class AppBroker(StubBroker):
        pass

    patch._wrap(AppBroker)
    monkeypatch.delenv(patch.STORE_URL, raising=False)
    with pytest.raises(RuntimeError, match="RELIABLE_COMPAT_STORE_URL is not set"):
        AppBroker()


def test_the_patch_covers_every_broker_dramatiq_ships() -> None:
    names = {cls.__name__ for cls in patch.broker_classes()}
    assert {"StubBroker", "RabbitmqBroker", "RedisBroker"} <= names
    assert all(issubclass(cls, dramatiq.Broker) for cls in patch.broker_classes())


def _sdist(tmp_path: Path, version: str, files: dict[str, str]) -> Path:
    archive = tmp_path / f"dramatiq-{version}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"dramatiq-{version}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return archive


def test_the_test_tree_holds_the_sdist_tests_and_our_shim(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "CACHE", tmp_path / "cache")
    archive = _sdist(tmp_path, "9.9.9", {"tests/test_x.py": "def test_x(): pass\n", "dramatiq/__init__.py": ""})
    work = run.test_tree(archive, "9.9.9")
    run.add_shim(work)
    assert sorted(p.name for p in (work / "tests").iterdir()) == ["__init__.py", "common.py", "conftest.py",
                                                                   "test_x.py"]
    assert not (work / "dramatiq").exists(), "only the tests are taken from the sdist"
    assert "testpaths = tests" in (work / "pytest.ini").read_text()


def test_an_sdist_without_tests_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run, "CACHE", tmp_path / "cache")
    archive = _sdist(tmp_path, "9.9.9", {"dramatiq/__init__.py": ""})
    with pytest.raises(SystemExit, match="has no tests/ directory"):
        run.test_tree(archive, "9.9.9")


def test_each_sqlite_store_is_fresh_and_migrated() -> None:
    factory = plugin.StoreFactory("sqlite")
    try:
        first, second = factory.new(), factory.new()
        assert first != second
        for url in (first, second):
            store = StateStore(url)
            store.check_schema()
            assert store.list_jobs() == []
            store.close()
    finally:
        factory.close()
    assert not factory.directory.exists()
