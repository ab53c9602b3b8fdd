"""Helpers shared by the tests (importable as `support`: pytest puts tests/ on sys.path)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import click
import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine, create_engine, event, text

from reliable.testing import wait_for  # the one way a test waits (moved there for apps' tests)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PG_ADMIN_URL = os.environ.get("RELIABLE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
RABBITMQ_URL = os.environ.get("RELIABLE_TEST_RABBITMQ", "amqp://guest:guest@127.0.0.1:5672/")
CLI = "from reliable.cli.main import main; main()"

T = TypeVar("T")
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def port_open(host: str, port: int) -> bool:
    """Whether something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller binds it soon after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def require_service(name: str, available: bool, *, problem: str = "is not reachable on 127.0.0.1") -> None:
    """Skip (locally) or fail (CI) when a real service (or a tool) the test needs is absent."""
    if available:
        return
    message = f"{name} {problem}"
    if IN_CI:
        pytest.fail(f"{message}; under CI=true every integration test is mandatory")
    pytest.skip(f"{message} (start it to run this test)")


@contextlib.contextmanager
def scratch_database(prefix: str, *, options: str = "") -> Iterator[str]:
    """A new PostgreSQL database named `prefix` + random hex (CREATE DATABASE ... `options`), its
    URL; dropped (connections forced out) afterwards. Requires PostgreSQL (skips or fails as
    `require_service` says)."""
    require_service("PostgreSQL", port_open("127.0.0.1", 5432))
    name = f"{prefix}{uuid.uuid4().hex[:10]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT", pool_pre_ping=True)
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" {options}'.rstrip()))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def exporter(store_url: str, *args: str, env: Mapping[str, str] | None = None,
             startup: float = 30.0, cli: Sequence[str] = (sys.executable, "-c", CLI),
             base_env: Mapping[str, str] | None = None, host: str | None = "127.0.0.1",
             connect: str = "127.0.0.1") -> Iterator[str]:
    """Run `reliable exporter` as a real subprocess on a free port; yield its base URL (on `connect`); stop it.

    `cli` is the command (another virtual environment's `reliable`), `base_env` the environment
    `env` goes on top of (default: this one), PROMETHEUS_MULTIPROC_DIR removed from it. `host`: its
    --host (None: none given, the default or RELIABLE_EXPORTER_HOST applies)."""
    port = free_port()
    command: Sequence[str] = [*cli, "exporter", *(("--host", host) if host else ()), "--port", str(port),
                              "--store", store_url, *args]
    child_env = {k: v for k, v in (os.environ if base_env is None else base_env).items()
                 if k != "PROMETHEUS_MULTIPROC_DIR"}
    child_env.update(env or {})
    process = subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://{connect}:{port}"

    def listening() -> bool:
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"exporter exited with {process.returncode}: {err.decode()}{out.decode()}")
        try:
            httpx.get(f"{base}/", timeout=1.0)
        except httpx.TransportError:
            return False
        return True

    try:
        wait_for(listening, "the exporter to listen", timeout=startup)
        yield base
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Terminate a server the test started (kill it after 10 s) and close its pipes."""
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def scrape(base: str) -> Samples:
    """GET /metrics and parse it: {(sample name, sorted labels): value}."""
    response = httpx.get(f"{base}/metrics", timeout=30.0)
    assert response.status_code == 200, response.text
    samples: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def sample_value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum of the samples called `name` that carry `labels` (None: there is none)."""
    found = [v for (sample, tags), v in samples.items() if sample == name and labels.items() <= dict(tags).items()]
    return sum(found) if found else None


def promtool_fires(promtool: str, rules: str, workdir: Path, series: str, before: float, after: float,
                   alert: str, labels: Mapping[str, str]) -> None:
    """`promtool test rules` over `rules` (an exported rule file's text), fed `series` at `before` then
    `after` for 20 minutes: `alert` fires at 5m with `labels` (its own labels and the series')."""
    (workdir / "rules.yml").write_text(rules)
    expected = "ALERTS{" + ",".join(f'{k}="{v}"' for k, v in {"alertname": alert, "alertstate": "firing",
                                                               **labels}.items()) + "}"
    test = {"rule_files": ["rules.yml"], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series, "values": f"{before:g} {after:g}x20"}],
        "promql_expr_test": [{"expr": f'ALERTS{{alertname="{alert}",alertstate="firing"}}', "eval_time": "5m",
                              "exp_samples": [{"labels": expected, "value": 1}]}],
    }]}
    (workdir / "fires_test.yml").write_text(yaml.safe_dump(test))
    done = subprocess.run([promtool, "test", "rules", "fires_test.yml"], cwd=workdir, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


@dataclass
class Clock:
    """An injectable clock (`StateStore(clock=...)`, `AlertEngine(clock=...)`): tests move time, never sleep."""

    now: float = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@contextlib.contextmanager
def pool_checkouts(engine: Engine) -> Iterator[list[object]]:
    """Every connection checked out of `engine`'s pool inside the block (what a call costs)."""
    taken: list[object] = []

    def count(dbapi_connection: object, record: object, proxy: object) -> None:
        taken.append(dbapi_connection)

    event.listen(engine, "checkout", count)
    try:
        yield taken
    finally:
        event.remove(engine, "checkout", count)


@contextlib.contextmanager
def row_locked(engine: Engine, job_id: str) -> Iterator[object]:
    """Lock the job's row (PostgreSQL) on a connection of its own until the block ends (or its
    `rollback()`): every write of that job waits meanwhile. Yields the connection."""
    with engine.connect() as conn:
        # A store's engine ends a transaction idle for 5 s (reliable.store.engine): not this one.
        conn.execute(text("SET LOCAL idle_in_transaction_session_timeout = 0"))
        conn.execute(text("SELECT 1 FROM reliable_jobs WHERE job_id = :id FOR UPDATE"), {"id": job_id})
        yield conn
        conn.rollback()


def waiting_on_a_lock(engine: Engine) -> bool:
    """Whether a backend of `engine`'s database waits for a lock (a write held by `row_locked`)."""
    with engine.connect() as conn:
        return bool(conn.execute(text(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )).scalar())


@contextlib.contextmanager
def recorded_reads(engine: Engine, table: str) -> Iterator[list[tuple[str, object]]]:
    """Every SELECT (or WITH) statement naming `table` that `engine` executes inside the block, with
    its parameters: what `query_plans` explains."""
    statements: list[tuple[str, object]] = []

    def record(_conn: object, _cursor: object, statement: str, params: object, _context: object,
               _many: bool) -> None:
        if table in statement and statement.lstrip().upper().startswith(("SELECT", "WITH")):
            statements.append((statement, params))

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


def query_plans(engine: Engine, statements: Sequence[tuple[str, object]]) -> list[tuple[str, str]]:
    """(statement, its PostgreSQL EXPLAIN plan) for each recorded statement."""
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        return [(statement, "\n".join(row[0] for row in driver.execute("EXPLAIN " + statement, params)))
                for statement, params in statements]


def cli_commands(group: click.Group | None = None,
                 path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    """Every leaf command of `reliable` (or of `group`) with the words that run it, lazy commands
    loaded: the one walk of the command tree the tests that enumerate CLI surfaces share."""
    if group is None:
        from reliable.cli.main import cli
        group = cli
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        if isinstance(command, click.Group):
            yield from cli_commands(command, (*path, name))
        else:
            yield (*path, name), command


def docs_script(name: str) -> ModuleType:
    """The generator script docs/<name>.py loaded as a module (the docs/ folder is no package)."""
    path = Path(__file__).resolve().parents[1] / "docs" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module
