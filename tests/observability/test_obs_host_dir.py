"""The host's metrics directory (reliable.multiprocess): where `reliable worker` and `reliable exporter`
meet by default, who may be trusted there, and dead processes' files folded in without a sum going down."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from reliable import multiprocess
from reliable.errors import ConfigError
from reliable.multiprocess import (
    ENV,
    HostCollector,
    app_dir,
    compact,
    default_dir,
    prepare,
    store_dirs,
    store_key,
    user_dir,
)
from reliable.store.db import database_location

# A process that counts `n` into the directory, with a live gauge and a histogram, then exits (or stays).
WORKER = """
import sys, time
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
registry = CollectorRegistry()
c = Counter("reliable_dead_letters", "d", ["actor"], registry=registry)
g = Gauge("reliable_leases_held", "l", registry=registry, multiprocess_mode="livesum")
h = Histogram("reliable_dispatch_latency_seconds", "h", ["actor"], buckets=(1.0, 5.0), registry=registry)
c.labels("a").inc(int(sys.argv[1])); g.set(3); h.labels("a").observe(0.5)
if len(sys.argv) > 2:
    print("ready", flush=True); sys.stdin.read()
"""


def totals(directory: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(HostCollector(directory))
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def run_worker(directory: Path, count: int) -> None:
    subprocess.run([sys.executable, "-c", WORKER, str(count)], env={**os.environ, ENV: str(directory)},
                   check=True, timeout=60)


def test_dead_processes_are_folded_in_and_no_sum_goes_down(tmp_path: Path) -> None:
    directory = prepare(tmp_path / "metrics")
    live = subprocess.Popen([sys.executable, "-c", WORKER, "10", "stay"], env={**os.environ, ENV: str(directory)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert live.stdout is not None and live.stdout.readline().strip() == "ready"
        run_worker(directory, 2)
        run_worker(directory, 3)
        files = sorted(p.name for p in directory.glob("*.db"))
        assert len([f for f in files if f.startswith("counter_")]) == 3
        seen = totals(directory)  # the exporter compacts before it reads
        assert seen[("reliable_dead_letters_total", (("actor", "a"),))] == 15
        assert seen[("reliable_dispatch_latency_seconds_count", (("actor", "a"),))] == 3
        assert seen[("reliable_dispatch_latency_seconds_bucket", (("actor", "a"), ("le", "1.0")))] == 3
        assert seen[("reliable_leases_held", ())] == 3  # only the live process's gauge counts
        names = sorted(p.name for p in directory.glob("*.db"))
        assert names == sorted(["counter_merged.db", "histogram_merged.db", f"counter_{live.pid}.db",
                                f"histogram_{live.pid}.db", f"gauge_livesum_{live.pid}.db"])
        assert compact(directory) == 0  # nothing more to fold
        run_worker(directory, 4)
        assert totals(directory)[("reliable_dead_letters_total", (("actor", "a"),))] == 19
    finally:
        live.communicate("", timeout=30)
    assert compact(directory) == 3  # the last process's counter, histogram and gauge files
    after = totals(directory)
    assert after[("reliable_dead_letters_total", (("actor", "a"),))] == 19
    assert ("reliable_leases_held", ()) not in after or after[("reliable_leases_held", ())] == 0
    assert sorted(p.name for p in directory.glob("*.db")) == ["counter_merged.db", "histogram_merged.db"]


def test_the_default_is_per_app_under_the_users_and_the_variable_wins(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path: Path) -> None:
    monkeypatch.delenv(ENV, raising=False)
    assert user_dir() == Path("/tmp") / f"reliable-metrics-{os.getuid()}"
    shop, billing = default_dir("shop.tasks"), default_dir("billing.tasks:broker")
    assert shop.parent == billing.parent == user_dir() and shop != billing
    assert shop.name.startswith("shop.tasks-") and billing.name.startswith("billing.tasks-")
    # Two projects' `tasks` modules are two apps; one app names one directory, however often asked.
    assert default_dir("tasks", tmp_path / "one") != default_dir("tasks", tmp_path / "two")
    assert default_dir("shop.tasks") == app_dir("shop.tasks", ".") == shop
    monkeypatch.setenv(ENV, str(tmp_path))
    assert default_dir("shop.tasks") == tmp_path == default_dir("billing.tasks")


def test_the_store_key_names_the_database_not_the_credentials(tmp_path: Path) -> None:
    def key(url: str) -> str:
        return store_key(database_location(url))

    assert key("postgresql+psycopg://alice:secret@db.example/shop") == key("postgresql://bob@db.example:5432/shop")
    assert "secret" not in database_location("postgresql+psycopg://alice:secret@db.example/shop")
    assert key("postgresql+psycopg://alice@db.example/shop") != key("postgresql+psycopg://alice@db.example/billing")
    assert key(f"sqlite:///{tmp_path}/a.db") != key(f"sqlite:///{tmp_path}/b.db")


def test_a_default_directory_someone_else_could_write_to_is_refused(monkeypatch: pytest.MonkeyPatch,
                                                                      tmp_path: Path) -> None:
    monkeypatch.delenv(ENV, raising=False)
    shared = tmp_path / "reliable-metrics"
    monkeypatch.setattr(multiprocess, "user_dir", lambda: shared)
    assert prepare(shared) == shared and (shared.stat().st_mode & 0o777) == 0o700  # created private
    app = prepare(app_dir("shop.tasks"))
    assert app.parent == shared and (app.stat().st_mode & 0o777) == 0o700
    app.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        prepare(app)
    app.rmdir()
    shared.chmod(0o777)
    with pytest.raises(ConfigError, match="writable by others"):
        prepare(shared)
    with pytest.raises(ConfigError, match="writable by others"):
        prepare(app_dir("shop.tasks"))  # an app's directory in a parent others may write is refused too
    shared.rmdir()
    shared.symlink_to(tmp_path)
    with pytest.raises(ConfigError, match="not a directory"):
        prepare(shared)
    named = tmp_path / "named"
    named.mkdir(mode=0o777)
    named.chmod(0o777)
    assert prepare(named) == named  # a directory named on purpose may be shared


# A worker process of an app: counts into its directory and marks it with its store, as a worker does at boot.
APP_WORKER = """
import os, sys
from prometheus_client import CollectorRegistry, Counter
from reliable.multiprocess import ENV, mark_store
from reliable.store.db import database_location
registry = CollectorRegistry()
Counter("reliable_dead_letters", "d", ["actor"], registry=registry).labels(sys.argv[1]).inc(int(sys.argv[2]))
mark_store(os.environ[ENV], database_location(sys.argv[3]))
"""


def test_two_apps_of_one_user_each_have_their_exporter(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Two apps run by one user, each with its store: on their defaults each exporter serves its own
    app's series only (a real `reliable exporter`, the user's real default directory)."""
    from support import CLI, exporter, sample_value, scrape

    monkeypatch.delenv(ENV, raising=False)
    tag = uuid.uuid4().hex[:8]
    apps = {"shop": f"shop_{tag}.tasks", "billing": f"billing_{tag}.tasks"}
    stores = {name: f"sqlite:///{tmp_path}/{name}.db" for name in apps}
    directories = {name: default_dir(app) for name, app in apps.items()}  # what `reliable worker APP` joins
    assert directories["shop"] != directories["billing"]
    try:
        for name, url in stores.items():
            subprocess.run([sys.executable, "-c", CLI, "db", "upgrade", "--store", url], check=True,
                           capture_output=True, timeout=120)
            directory = prepare(directories[name])
            subprocess.run([sys.executable, "-c", APP_WORKER, f"{name}_actor", "3", url],
                           env={**os.environ, ENV: str(directory)}, check=True, timeout=60)
        assert store_dirs(database_location(stores["shop"])) == [directories["shop"]]
        assert store_dirs(database_location(stores["billing"])) == [directories["billing"]]
        for name, other in (("shop", "billing"), ("billing", "shop")):
            with exporter(stores[name]) as base:
                samples = scrape(base)
            assert sample_value(samples, "reliable_dead_letters_total", actor=f"{name}_actor") == 3
            assert sample_value(samples, "reliable_dead_letters_total", actor=f"{other}_actor") is None
    finally:
        for directory in directories.values():
            shutil.rmtree(directory, ignore_errors=True)


def test_an_unreadable_file_of_a_dead_process_is_set_aside_not_fatal(tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    directory = prepare(tmp_path / "metrics")
    run_worker(directory, 2)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    # A dead process's file whose one entry claims to run past the used size: "file is corrupted".
    (directory / f"counter_{dead}.db").write_bytes(struct.pack("<ii", 32, 0) + struct.pack("<i", 1000) + bytes(60))
    assert totals(directory)[("reliable_dead_letters_total", (("actor", "a"),))] == 2
    assert (directory / f"counter_{dead}.unreadable").exists() and "unreadable" in caplog.text
