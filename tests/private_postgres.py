"""A private PostgreSQL cluster for one test: settings of its own, and free to stop and start.

The shared PostgreSQL on 127.0.0.1:5432 serves everybody's tests, so a test that needs a small
`max_connections` or an outage starts its own cluster here:

    with private_postgres(max_connections=50) as pg:
        engine = create_engine(pg.url)      # the admin URL (superuser postgres, trust auth)
        pg.stop()                           # an outage: clients get "connection refused"
        pg.start()                          # same data, same port

`initdb` into a temporary directory, trust authentication, a free port on 127.0.0.1, the Unix
socket inside the directory, fsync off (nothing here needs to survive a power cut). On exit the
cluster is stopped and the directory removed, whatever happened. Every command is bounded in time.
initdb and pg_ctl refuse to run as root, so as root they run as the `postgres` OS user.
Without the PostgreSQL binaries a test skips, or fails under CI=true (see `support.IN_CI`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import psycopg

from support import free_port, require_service

__all__ = ["COMMAND_TIMEOUT", "PrivatePostgres", "postgres_bindir", "private_postgres"]

#: How long one initdb / pg_ctl command may take (pg_ctl's own wait is a few seconds shorter).
COMMAND_TIMEOUT = 60.0
#: Settings every private cluster gets unless the test overrides them: speed over durability.
DEFAULT_SETTINGS: Mapping[str, str] = {
    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off", "shared_buffers": "32MB",
    "max_wal_size": "256MB", "log_min_messages": "warning", "logging_collector": "off",
}


def postgres_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/*/bin holding initdb and pg_ctl (or the ones on PATH)."""
    def version(directory: str) -> int:
        name = Path(directory).parent.name
        return int(name) if name.isdigit() else 0

    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=version, reverse=True):
        if os.access(f"{directory}/initdb", os.X_OK) and os.access(f"{directory}/pg_ctl", os.X_OK):
            return Path(directory)
    initdb = shutil.which("initdb")
    if initdb and shutil.which("pg_ctl"):
        return Path(initdb).parent
    return None


class PrivatePostgres:
    """One initdb'ed cluster in a temporary directory; `url` is its superuser's URL."""

    def __init__(self, bindir: Path, settings: Mapping[str, object]) -> None:
        self.bindir = bindir
        self._as_postgres = os.geteuid() == 0
        self.root = Path(tempfile.mkdtemp(prefix="reliable-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self.settings = {**DEFAULT_SETTINGS, **{k: str(v) for k, v in settings.items()}}
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"
        if self._as_postgres:
            owner = pwd.getpwnam("postgres")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)

    @property
    def dsn(self) -> str:
        """The admin URL in libpq form (for psycopg.connect)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, database: str) -> str:
        """The store URL of `database` on this cluster."""
        return self.url.rsplit("/", 1)[0] + f"/{database}"

    def create_database(self, name: str) -> str:
        """CREATE DATABASE `name`; its URL."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def _run(self, *argv: str) -> str:
        command = [str(self.bindir / argv[0]), *argv[1:]]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False,
                                  cwd=self.root)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"{' '.join(argv)} took more than {COMMAND_TIMEOUT}s; log: {self._log_tail()}") from exc
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {(done.stderr or done.stdout).strip()}"
                               f"\nlog: {self._log_tail()}")
        return done.stdout

    def _log_tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def init(self) -> None:
        """initdb with trust auth and this cluster's settings in postgresql.conf."""
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--no-sync", "--no-instructions")
        lines = [f"port = {self.port}", "listen_addresses = '127.0.0.1'",
                 f"unix_socket_directories = '{self.root}'"]
        lines += [f"{name} = '{value}'" for name, value in self.settings.items()]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# reliable tests (tests/private_postgres.py)\n" + "\n".join(lines) + "\n")

    def start(self) -> None:
        """Start the cluster and wait until it accepts connections (bounded)."""
        wait = str(int(COMMAND_TIMEOUT) - 5)
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", wait, "start")
        with psycopg.connect(self.dsn, connect_timeout=5) as conn:
            conn.execute("SELECT 1")

    def stop(self, mode: str = "fast") -> None:
        """Stop the cluster (`fast`: open sessions are cut, as in an outage); wait until it is down."""
        wait = str(int(COMMAND_TIMEOUT) - 5)
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", wait, "stop")

    def running(self) -> bool:
        """Whether the postmaster runs (pg_ctl status)."""
        try:
            self._run("pg_ctl", "-D", str(self.data), "status")
        except RuntimeError:
            return False
        return True

    def remove(self) -> None:
        """Stop the cluster if it runs (immediate mode as a last resort) and delete its directory."""
        try:
            if self.data.exists() and self.running():
                try:
                    self.stop("fast")
                except RuntimeError:
                    self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@contextlib.contextmanager
def private_postgres(**settings: object) -> Iterator[PrivatePostgres]:
    """A started private cluster with `settings` (e.g. max_connections=50); removed on exit.

    Skips the test (fails it under CI=true) when the PostgreSQL server binaries are not installed,
    or when running as root without a `postgres` OS user to run them as.
    """
    bindir = postgres_bindir()
    require_service("PostgreSQL server binaries (initdb, pg_ctl)", bindir is not None,
                    problem="are not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            require_service("a 'postgres' OS user to run initdb as (it refuses root)", False, problem="is missing")
    assert bindir is not None
    cluster = PrivatePostgres(bindir, settings)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.remove()
