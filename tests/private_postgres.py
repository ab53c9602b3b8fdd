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

`replicated_postgres()` starts a primary and a streaming standby made from it (`pg_basebackup -R`),
synchronous by default, for the failover tests:

    with replicated_postgres(synchronous=True) as pair:
        url = pair.create_database("store")  # both hosts, target_session_attrs=read-write
        pair.primary.kill()                   # kill -9 of the postmaster
        pair.promote()                        # the standby becomes the primary
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import psycopg

from support import free_port, require_service

__all__ = ["COMMAND_TIMEOUT", "DEFAULT_SETTINGS", "PrivatePostgres", "ReplicatedPostgres", "alive", "postgres_bindir",
           "private_postgres", "replicated_postgres", "require_binaries"]

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

    def add_password_role(self, role: str, password: str) -> None:
        """CREATE ROLE `role` that logs in with `password` only (scram-sha-256 over TCP; every other
        role keeps trust): for tests of a wrong or missing password."""
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
        hba = self.data / "pg_hba.conf"
        hba.write_text(f"host all {role} 127.0.0.1/32 scram-sha-256\n{hba.read_text()}")  # the first match wins
        with psycopg.connect(self.dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT pg_reload_conf()")

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
        self.configure()

    def configure(self) -> None:
        """Append this cluster's port, socket directory and settings to its postgresql.conf (the
        last line of a setting wins: a base backup's copy of the primary's lines is overridden)."""
        lines = [f"port = {self.port}", "listen_addresses = '127.0.0.1'",
                 f"unix_socket_directories = '{self.root}'"]
        lines += [f"{name} = '{value}'" for name, value in self.settings.items()]
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write("\n# reliable tests (tests/private_postgres.py)\n" + "\n".join(lines) + "\n")

    def base_backup_of(self, primary: PrivatePostgres, application_name: str) -> None:
        """Make this cluster a streaming standby of `primary` (pg_basebackup -R: standby.signal and
        primary_conninfo naming `application_name`, as synchronous_standby_names may list it)."""
        conninfo = f"host=127.0.0.1 port={primary.port} user=postgres application_name={application_name}"
        self._run("pg_basebackup", "-d", conninfo, "-D", str(self.data), "-R", "-X", "stream", "--no-sync",
                  "-c", "fast")
        self.configure()

    def promote(self) -> None:
        """Promote this standby (pg_ctl promote) and wait until it accepts writes (bounded)."""
        wait = str(int(COMMAND_TIMEOUT) - 5)
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", wait, "promote")
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while True:
            with psycopg.connect(self.dsn, connect_timeout=5) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            if row is not None and not row[0]:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby on port {self.port} still in recovery {COMMAND_TIMEOUT}s after "
                                   f"pg_ctl promote; log: {self._log_tail()}")
            time.sleep(0.05)

    def kill(self) -> None:
        """kill -9 of the postmaster, as in a crash of the machine's database: no shutdown, no WAL
        sent after this instant; wait (bounded) until it and its server processes are gone."""
        pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while alive(pid) or self._port_busy():
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres on port {self.port} still up {COMMAND_TIMEOUT}s after kill -9")
            time.sleep(0.05)
        # pg_ctl and a new postmaster count one not yet reaped (a zombie) as running: `remove` would
        # wait for it, and `start` would find its lock files taken.
        (self.data / "postmaster.pid").unlink(missing_ok=True)
        for lock in self.root.glob(".s.PGSQL.*.lock"):
            lock.unlink(missing_ok=True)

    def _port_busy(self) -> bool:
        try:
            psycopg.connect(self.dsn, connect_timeout=1).close()
        except psycopg.OperationalError:
            return False
        return True

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
        if not (self.data / "postmaster.pid").exists():
            return False
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


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def require_binaries() -> Path:
    """The PostgreSQL bin directory; skips the test (fails it under CI=true) without the binaries,
    or when running as root without a `postgres` OS user to run them as."""
    bindir = postgres_bindir()
    require_service("PostgreSQL server binaries (initdb, pg_ctl)", bindir is not None,
                    problem="are not installed")
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            require_service("a 'postgres' OS user to run initdb as (it refuses root)", False, problem="is missing")
    assert bindir is not None
    return bindir


@contextlib.contextmanager
def private_postgres(**settings: object) -> Iterator[PrivatePostgres]:
    """A started private cluster with `settings` (e.g. max_connections=50); removed on exit.

    Skips the test (fails it under CI=true) when the PostgreSQL server binaries are not installed,
    or when running as root without a `postgres` OS user to run them as.
    """
    cluster = PrivatePostgres(require_binaries(), settings)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.remove()


#: The standby's name in the primary's synchronous_standby_names and in pg_stat_replication.
STANDBY_NAME = "standby1"
#: What a primary needs to stream WAL to a standby; the standby reads while it replays.
_REPLICATION_SETTINGS: Mapping[str, object] = {"wal_level": "replica", "max_wal_senders": 4, "hot_standby": "on",
                                               "wal_keep_size": "64MB"}


class ReplicatedPostgres:
    """A private primary and its streaming standby (`replicated_postgres`)."""

    def __init__(self, primary: PrivatePostgres, standby: PrivatePostgres) -> None:
        self.primary = primary
        self.standby = standby

    def url_for(self, database: str) -> str:
        """The store URL of `database` naming both servers: libpq tries them in order and keeps the
        one that accepts writes (target_session_attrs=read-write), so it follows a promotion."""
        return (f"postgresql+psycopg://postgres@/{database}?host=127.0.0.1:{self.primary.port}"
                f"&host=127.0.0.1:{self.standby.port}&target_session_attrs=read-write")

    def create_database(self, name: str) -> str:
        """CREATE DATABASE `name` on the primary, wait until the standby has it; its two-host URL."""
        self.primary.create_database(name)
        self.wait_replayed()
        return self.url_for(name)

    def wait_replayed(self, timeout: float = COMMAND_TIMEOUT) -> None:
        """Wait (bounded) until the standby has replayed everything the primary wrote so far."""
        with psycopg.connect(self.primary.dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()
        assert row is not None
        deadline = time.monotonic() + timeout
        with psycopg.connect(self.standby.dsn, autocommit=True, connect_timeout=5) as conn:
            while True:
                replayed = conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", [row[0]]).fetchone()
                if replayed is not None and replayed[0]:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the standby did not replay up to {row[0]} within {timeout}s")
                time.sleep(0.02)

    def sync_state(self) -> str | None:
        """The standby's sync_state in the primary's pg_stat_replication (None: not connected)."""
        with psycopg.connect(self.primary.dsn, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute("SELECT sync_state FROM pg_stat_replication WHERE application_name = %s",
                               [STANDBY_NAME]).fetchone()
        return None if row is None else str(row[0])

    def promote(self) -> None:
        """Promote the standby; it accepts writes on return."""
        self.standby.promote()


@contextlib.contextmanager
def replicated_postgres(*, synchronous: bool = True, **settings: object) -> Iterator[ReplicatedPostgres]:
    """A started primary with a streaming standby, both removed on exit (whatever happened).

    `synchronous`: the primary's commits wait until the standby has flushed them
    (synchronous_commit=on, synchronous_standby_names naming it); otherwise the standby is
    asynchronous (a commit returns at once; a failover can lose it). `settings` go to both servers.
    Returns once the standby streams (and, when synchronous, is the primary's sync standby).
    """
    bindir = require_binaries()
    primary_settings = {**_REPLICATION_SETTINGS, "synchronous_commit": "on",
                        "synchronous_standby_names": STANDBY_NAME if synchronous else "", **settings}
    primary = PrivatePostgres(bindir, primary_settings)
    # Not the primary's synchronous_standby_names (the base backup copies its postgresql.conf): once
    # promoted, the standby's commits would wait for a standby of its own that never comes.
    standby = PrivatePostgres(bindir, {**_REPLICATION_SETTINGS, "synchronous_commit": "on",
                                       "synchronous_standby_names": "", **settings})
    pair = ReplicatedPostgres(primary, standby)
    try:
        primary.init()
        primary.start()
        standby.base_backup_of(primary, STANDBY_NAME)
        standby.start()
        wanted = "sync" if synchronous else "async"
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while (state := pair.sync_state()) != wanted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the standby's sync_state is {state!r}, not {wanted!r}, {COMMAND_TIMEOUT}s after "
                                   f"it started; log: {standby._log_tail()}")
            time.sleep(0.05)
        yield pair
    finally:
        try:
            standby.remove()
        finally:
            primary.remove()
