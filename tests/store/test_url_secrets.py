"""No password is ever printed: every error that names a store URL masks it.

Each path is tried for real: configuration mistakes (unknown driver, unsupported database, missing
driver module, unparseable URL), a refused connection (a closed port), a failed authentication
(a private PostgreSQL that requires a password), `install()` with a bad URL, the CLI, and the
log of a worker process whose store refuses connections. The secret must not appear in the
exception's text, repr, args, chained causes and contexts, formatted traceback, or the logs.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import Retries
from sqlalchemy import text

import reliable
from reliable.errors import ConfigError, StoreError
from reliable.redact import redact_url
from reliable.store import StateStore

from support import require_service, wait_for

SECRET = "s3cr3t-pw"
RELIABLE = str(Path(sys.executable).parent / "reliable")


def free_port() -> int:
    """A TCP port nothing listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def chain(exc: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts (and SQLAlchemy's wrapped `orig`), each once."""
    seen: list[BaseException] = []
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        stack.extend([current.__cause__, current.__context__, getattr(current, "orig", None)])
    return seen


def assert_no_secret(exc: BaseException, *texts: str) -> None:
    """SECRET appears in none of the exception's renderings, nor in `texts` (logs, output)."""
    rendered = ["".join(traceback.format_exception(exc)), *texts]
    for link in chain(exc):
        rendered.extend([str(link), repr(link), *(repr(arg) for arg in link.args)])
    leaks = [text for text in rendered if SECRET in text]
    assert not leaks, f"the password leaked: {leaks[0][:500]}"


# -- configuration mistakes ------------------------------------------------------------------------

BAD_URLS = {
    "unknown driver": (f"postgresql+nosuchdriver://app:{SECRET}@db.example/app", "unknown driver"),
    "unsupported backend": (f"mysql://app:{SECRET}@db.example/app", "reliable supports sqlite, postgresql"),
    "missing driver module": (f"postgresql+pg8000://app:{SECRET}@db.example/app", "needs the 'pg8000' module"),
    "unparseable": (f"postgres ql://app:{SECRET}@db.example/app", "does not parse"),
    "query password": (f"mysql://app@db.example/app?password={SECRET}", "reliable supports"),
    "sqlite without file": (f"sqlite://app:{SECRET}@", "SQLite needs a file"),
}


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_config_errors_mask_the_password(case: str, caplog: pytest.LogCaptureFixture) -> None:
    url, expected = BAD_URLS[case]
    if case == "missing driver module" and _importable("pg8000"):
        pytest.skip("pg8000 is installed here: this path needs a driver that is not")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ConfigError, match=expected) as info:
        StateStore(url)
    assert_no_secret(info.value, caplog.text)
    if case != "unparseable":
        assert "***" in str(info.value)  # the URL is shown, masked


@pytest.mark.parametrize("case", sorted(BAD_URLS))
def test_install_rejects_a_bad_url_at_once(case: str, caplog: pytest.LogCaptureFixture) -> None:
    url, expected = BAD_URLS[case]
    if case == "missing driver module" and _importable("pg8000"):
        pytest.skip("pg8000 is installed here")
    caplog.set_level(logging.DEBUG)
    broker = StubBroker()
    before = list(broker.middleware)
    with pytest.raises(ConfigError, match=expected) as info:
        reliable.install(broker, store=url)
    assert_no_secret(info.value, caplog.text)
    assert broker.middleware == before  # nothing was installed
    assert any(isinstance(m, Retries) for m in broker.middleware)


def _importable(name: str) -> bool:
    try:
        __import__(name)
    except ImportError:
        return False
    return True


# -- a refused connection (a closed port) ----------------------------------------------------------

def assert_store_calls_fail_masked(url: str, why: str, shown: str, caplog: pytest.LogCaptureFixture) -> None:
    """A read, the schema check and the hot path's claim each fail with `why`, the URL shown masked."""
    store = StateStore(url)
    try:
        assert SECRET not in repr(store.engine) + store.url
        for attempt in (store.now, store.check_schema, lambda: store.claim("j", worker_id="w", lease_ttl=5)):
            with pytest.raises(StoreError, match=why) as info:
                attempt()
            assert_no_secret(info.value, caplog.text)
            assert shown in str(info.value)
    finally:
        store.close()


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_refused_connection_masks_the_password(form: str, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    url = (f"postgresql+psycopg://app:{SECRET}@127.0.0.1:{port}/app" if form == "userinfo"
           else f"postgresql+psycopg://app@127.0.0.1:{port}/app?password={SECRET}")
    caplog.set_level(logging.DEBUG)
    assert_store_calls_fail_masked(url, "refused", "app:***@", caplog)


# -- a failed authentication (private PostgreSQL requiring a password) ------------------------------

def _pg_bin() -> Path | None:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if found:
        return found[-1].parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="module")
def password_pg() -> Iterator[tuple[int, str]]:
    """A private PostgreSQL (scram-sha-256 for every connection) on a free port; (port, password).

    Run as the `postgres` OS user when the tests run as root (initdb refuses root). Always stopped.
    """
    bin_dir = _pg_bin()
    require_service("PostgreSQL binaries (initdb, pg_ctl)", bin_dir is not None)
    assert bin_dir is not None
    as_user: list[str] = []
    owner: pwd.struct_passwd | None = None
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="reliable-auth-pg-"))
    password = "the-right-one-42"
    port = free_port()
    data = base / "data"
    pwfile = base / "pwfile"
    pwfile.write_text(password + "\n")
    if owner is not None:
        for path in (base, pwfile):
            os.chown(path, owner.pw_uid, owner.pw_gid)
    pg_ctl = [*as_user, str(bin_dir / "pg_ctl"), "-D", str(data)]
    try:
        subprocess.run([*as_user, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres",
                        "--auth=scram-sha-256", f"--pwfile={pwfile}", "--no-sync", "-E", "UTF8"],
                       check=True, capture_output=True, timeout=120)
        subprocess.run([*pg_ctl, "-l", str(base / "log"), "-w", "-t", "60", "-o",
                        f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off", "start"],
                       check=True, capture_output=True, timeout=90)
        yield port, password
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "-t", "30", "stop"], capture_output=True, timeout=60)
        shutil.rmtree(base, ignore_errors=True)


def test_failed_authentication_masks_the_password(password_pg: tuple[int, str],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    port, right = password_pg
    good = StateStore(f"postgresql+psycopg://postgres:{right}@127.0.0.1:{port}/postgres")
    try:  # the server accepts the right password: what follows fails on authentication alone
        with good.engine.connect() as conn:
            assert conn.execute(text("SELECT 1")).scalar_one() == 1
    finally:
        good.close()
    caplog.set_level(logging.DEBUG)
    assert_store_calls_fail_masked(f"postgresql+psycopg://postgres:{SECRET}@127.0.0.1:{port}/postgres",
                                   "password authentication failed", "postgres:***@", caplog)


# -- the CLI ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["jobs list", "demo --no-live"])
@pytest.mark.parametrize("url", [f"postgresql+nosuchdriver://app:{SECRET}@db.example/app",
                                 f"postgresql+psycopg://app:{SECRET}@127.0.0.1:{{port}}/app"])
def test_cli_errors_mask_the_password(url: str, command: str, tmp_path: Path) -> None:
    url = url.replace("{port}", str(free_port()))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELIABLE_")}
    extra = ["--workdir", str(tmp_path)] if command.startswith("demo") else []
    proc = subprocess.run([RELIABLE, *command.split(), "--store", url, *extra], capture_output=True, text=True,
                          env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "app:***@" in proc.stderr
    assert SECRET not in proc.stdout + proc.stderr


# -- a worker process whose store refuses connections ------------------------------------------------

WORKER_SCRIPT = """
import logging, sys, time
logging.basicConfig(level=logging.DEBUG, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
import dramatiq
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker
import reliable
from reliable.middleware import REGISTERED

broker = StubBroker()
broker.emit_after("process_boot")
dramatiq.set_broker(broker)
reliable.install(broker, store=sys.argv[1], recovery_interval=0.2, metrics=False)

@dramatiq.actor
def task():
    pass

# As if its producer had registered it: the worker's claim is the first store access.
broker.enqueue(task.message_with_options(**{REGISTERED: True}))
Worker(broker, worker_threads=1).start()
print("worker started", file=sys.stderr, flush=True)
time.sleep(120)
"""


def test_worker_log_masks_the_password_when_the_store_refuses(tmp_path: Path) -> None:
    url = f"postgresql+psycopg://app:{SECRET}@127.0.0.1:{free_port()}/app"
    log = tmp_path / "worker.log"
    script = tmp_path / "worker_app.py"
    script.write_text(WORKER_SCRIPT)
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, str(script), url], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    def warned() -> bool:
        text = log.read_text(errors="replace")
        assert proc.poll() is None, text
        return text.count("claim: store unavailable") >= 2 and "recovery pass failed" in text

    try:
        wait_for(warned, "the worker's store warnings", timeout=60)
    finally:
        proc.kill()
        proc.wait(10)
    text = log.read_text(errors="replace")
    assert "app:***@127.0.0.1" in text  # the URL is in the warnings, masked
    assert SECRET not in text


# -- the helper ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "shown"), [
    (f"postgresql+psycopg://app:{SECRET}@db:5432/app", "postgresql+psycopg://app:***@db:5432/app"),
    (f"postgresql://app@db/app?password={SECRET}&sslmode=require", "postgresql://app@db/app?password=***&sslmode=require"),
    (f"amqp://guest:{SECRET}@rabbit:5672/", "amqp://guest:***@rabbit:5672/"),
    (f"amqp://guest:{SECRET}@rabbit:notaport/", "amqp://guest:***@rabbit:notaport/"),
    (f"postgresql://app:pa@{SECRET}@db/app", "postgresql://app:***@db/app"),
    (f"host=db user=app password={SECRET} dbname=app", "host=db user=app password=*** dbname=app"),
    ("postgresql+psycopg://app@db/app", "postgresql+psycopg://app@db/app"),
    ("sqlite:///var/lib/reliable.db", "sqlite:///var/lib/reliable.db"),
])
def test_redact_url(raw: str, shown: str) -> None:
    assert redact_url(raw) == shown


def test_redact_url_of_a_sqlalchemy_url() -> None:
    from sqlalchemy.engine import make_url

    assert redact_url(make_url(f"postgresql+psycopg://app:{SECRET}@db/app")) == "postgresql+psycopg://app:***@db/app"


def test_store_reopened_after_fork_keeps_the_password_out_of_text(caplog: pytest.LogCaptureFixture) -> None:
    """`_ensure_process` re-creates the store from the URL object, never a rendered string."""
    port = free_port()
    store = StateStore(f"postgresql+psycopg://app:{SECRET}@127.0.0.1:{port}/app")
    middleware = reliable.ReliableMiddleware(store, metrics=False, recovery=False)
    middleware.runtime.pid = -2  # as in a forked child: the store is opened again from its URL
    reopened = middleware.store
    assert reopened is not store and reopened.engine.url.password == SECRET  # it can still connect
    with pytest.raises(StoreError) as info:
        reopened.now()
    assert_no_secret(info.value, caplog.text, repr(reopened.engine), reopened.url)
    store.close()
    reopened.close()
