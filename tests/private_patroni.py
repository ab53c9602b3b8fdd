"""A private Patroni cluster on etcd for one test: failover decided by Patroni, not by the test.

    with patroni_cluster(members=2) as cluster:        # synchronous_mode, one leader, one sync standby
        url = cluster.create_database("store")         # every member, target_session_attrs=read-write
        old = cluster.leader()
        old.kill()                                     # the leader's machine dies: Patroni and postgres, kill -9
        new = cluster.wait_leader(other_than=old)      # Patroni promoted the synchronous standby

One etcd (the Debian `etcd-server` package) with its client and peer ports free on 127.0.0.1 and
its data in a temporary directory; each member is a `patroni` process (the Debian `patroni`
package) with its own REST port, PostgreSQL port and directory, bootstrapped by initdb (the first
member to take the leader key) or pg_basebackup (the others), trust authentication on 127.0.0.1.
The PostgreSQL binaries and the root rule are `private_postgres`'s (as root, Patroni and the
postgres it runs are the `postgres` OS user). Every wait is on a condition with a deadline, and on
exit every process is killed (its process group: Patroni starts postgres in a session of its own)
and every directory removed, whatever happened. Without Patroni or etcd a test skips, or fails
under CI=true (scripts/services installs both).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import psycopg
from private_postgres import COMMAND_TIMEOUT, DEFAULT_SETTINGS, alive, require_binaries

from support import free_port, require_service, wait_for

__all__ = ["DCS_TIMEOUTS", "PatroniCluster", "PatroniMember", "patroni_cluster"]

#: Patroni's timing (its dynamic configuration): the leader key lives `ttl` seconds unless renewed,
#: the HA loop runs every `loop_wait` seconds, and a DCS or PostgreSQL call is retried for
#: `retry_timeout` seconds. Patroni wants loop_wait + 2 * retry_timeout <= ttl (it adjusts them
#: otherwise). A dead leader is replaced about `ttl` seconds after its last renewal.
DCS_TIMEOUTS: Mapping[str, int] = {"ttl": 10, "loop_wait": 1, "retry_timeout": 4}
#: The cluster's name: Patroni's keys live under /service/<scope> in etcd.
SCOPE = "reliable-test"


def _get(url: str) -> tuple[int, dict[str, Any]]:
    """GET a Patroni REST endpoint: (HTTP status, JSON body); (0, {}) when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status, json.loads(reply.read() or b"{}")
    except urllib.error.HTTPError as exc:  # 503: not in that role; the body still describes the member
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}
    except (OSError, ValueError):
        return 0, {}


class _Daemon:
    """A server process in a session of its own, its output in a log file; killed as a group."""

    def __init__(self, root: Path, name: str) -> None:
        self.root = root
        self.log = root / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def spawn(self, argv: list[str], *, as_postgres: bool) -> None:
        """Start `argv` (as the postgres OS user if asked) with a minimal environment."""
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.root), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.root, env=env, start_new_session=True,
                                            user="postgres" if as_postgres else None)

    def kill(self) -> None:
        """SIGKILL the process group and reap it (no-op when not started or already gone)."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=COMMAND_TIMEOUT)

    def tail(self) -> str:
        """The end of the log."""
        try:
            return f"--- {self.log}:\n{self.log.read_text(errors='replace')[-3000:]}"
        except OSError:
            return f"--- {self.log}: (none)"


class _Etcd(_Daemon):
    """A single-node etcd on free client and peer ports."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, "etcd")
        self.client_port, self.peer_port = free_port(), free_port()

    def start(self) -> None:
        """Start etcd and wait until it reports healthy."""
        client, peer = f"http://127.0.0.1:{self.client_port}", f"http://127.0.0.1:{self.peer_port}"
        self.spawn([shutil.which("etcd") or "etcd", "--name", "etcd1", "--data-dir", str(self.root / "etcd"),
                    "--listen-client-urls", client, "--advertise-client-urls", client,
                    "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                    "--initial-cluster", f"etcd1={peer}", "--initial-cluster-state", "new",
                    "--logger", "zap", "--log-level", "warn"], as_postgres=False)
        wait_for(lambda: _get(f"{client}/health")[1].get("health") == "true", "etcd healthy",
                 timeout=COMMAND_TIMEOUT, interval=0.1, context=self.tail)


class PatroniMember(_Daemon):
    """One Patroni member: its postgres (`pg_port`), REST API (`rest`) and directory (`root`)."""

    def __init__(self, name: str, root: Path, bindir: Path, etcd: _Etcd, settings: Mapping[str, str]) -> None:
        super().__init__(root, "patroni")
        self.name = name
        self.bindir = bindir
        self.data = root / "data"
        self.pg_port, self.rest_port = free_port(), free_port()
        self.rest = f"http://127.0.0.1:{self.rest_port}"
        self.config = root / "patroni.yml"
        self.config.write_text(json.dumps(self._config(etcd, settings), indent=1))  # JSON is YAML

    @property
    def dsn(self) -> str:
        """The member's superuser connection string (libpq form)."""
        return f"postgresql://postgres@127.0.0.1:{self.pg_port}/postgres"

    def _config(self, etcd: _Etcd, settings: Mapping[str, str]) -> dict[str, Any]:
        trust = ["local all all trust", "host all all 127.0.0.1/32 trust",
                 "host replication all 127.0.0.1/32 trust"]
        return {
            "scope": SCOPE, "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": f"127.0.0.1:{self.rest_port}", "connect_address": f"127.0.0.1:{self.rest_port}"},
            "etcd3": {"hosts": [f"127.0.0.1:{etcd.client_port}"]},
            "bootstrap": {
                "dcs": {**DCS_TIMEOUTS, "synchronous_mode": True, "maximum_lag_on_failover": 1048576,
                        "postgresql": {"use_pg_rewind": False, "use_slots": True,
                                       "parameters": {"max_connections": 100, "wal_keep_size": "64MB"}}},
                "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}, "no-sync"],
                "pg_hba": trust,
            },
            "postgresql": {
                "listen": f"127.0.0.1:{self.pg_port}", "connect_address": f"127.0.0.1:{self.pg_port}",
                "data_dir": str(self.data), "bin_dir": str(self.bindir), "pgpass": str(self.root / "pgpass"),
                "authentication": {"superuser": {"username": "postgres"}, "replication": {"username": "postgres"}},
                "basebackup": [{"checkpoint": "fast"}, "no-sync"],
                "parameters": {**settings, "unix_socket_directories": str(self.root)},
                "pg_hba": trust,
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False, "nosync": False},
        }

    def start(self) -> None:
        """Start Patroni (it starts, bootstraps or clones its postgres itself, or takes over the one
        running: a member's Patroni restarted after `kill_patroni`)."""
        self.spawn([shutil.which("patroni") or "patroni", str(self.config)], as_postgres=os.geteuid() == 0)

    def role(self) -> str:
        """The member's role as its REST API reports it ("primary", "replica", ...; "" when down)."""
        status, body = _get(f"{self.rest}/patroni")
        return str(body.get("role", "")) if status else ""

    def is_leader(self) -> bool:
        """Whether Patroni says this member is the running leader (GET /leader answers 200)."""
        return _get(f"{self.rest}/leader")[0] == 200

    def is_sync_standby(self) -> bool:
        """Whether this member is the synchronous standby, streaming (GET /sync answers 200)."""
        return _get(f"{self.rest}/sync")[0] == 200

    def accepts_writes(self) -> bool:
        """Whether the member's postgres is up and out of recovery (a promotion has finished)."""
        try:
            with psycopg.connect(self.dsn, connect_timeout=2, target_session_attrs="read-write"):
                return True
        except psycopg.OperationalError:
            return False

    def postmaster_pid(self) -> int | None:
        """The pid in the member's postmaster.pid (None without one)."""
        try:
            return int((self.data / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def kill_patroni(self) -> None:
        """kill -9 of Patroni alone: its postgres, in a session of its own, goes on running."""
        super().kill()

    def kill(self) -> None:
        """The member's machine dies: kill -9 of Patroni and of its postgres (the postmaster's process
        group: Patroni starts it in a session of its own, so it outlives a Patroni killed alone);
        returns once no process of the member is left."""
        pid = self.postmaster_pid()
        with contextlib.suppress(ProcessLookupError):
            group = os.getpgid(pid) if pid else None
            if self.process is not None:
                os.killpg(self.process.pid, signal.SIGKILL)
            if group is not None:
                os.killpg(group, signal.SIGKILL)
        super().kill()
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while pid is not None and alive(pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres of {self.name} (pid {pid}) still up {COMMAND_TIMEOUT}s after kill -9")
            time.sleep(0.05)


class PatroniCluster:
    """etcd and the Patroni members of `patroni_cluster`."""

    def __init__(self, etcd: _Etcd, members: list[PatroniMember]) -> None:
        self.etcd = etcd
        self.members = members

    def url_for(self, database: str) -> str:
        """The store URL of `database` naming every member, as docs/postgresql-failover.md tells
        users to write it: libpq keeps the one that accepts writes, whichever Patroni promoted."""
        hosts = "&".join(f"host=127.0.0.1:{m.pg_port}" for m in self.members)
        return f"postgresql+psycopg://postgres@/{database}?{hosts}&target_session_attrs=read-write"

    def logs(self) -> str:
        """The tails of every log (for a failure message)."""
        return "\n".join([self.etcd.tail(), *(m.tail() for m in self.members)])

    def leader(self) -> PatroniMember:
        """The member that is the running leader now (raises when there is none)."""
        leaders = [m for m in self.members if m.is_leader()]
        if len(leaders) != 1:
            raise RuntimeError(f"{len(leaders)} running leaders\n{self.logs()}")
        return leaders[0]

    def wait_leader(self, *, other_than: PatroniMember | None = None, timeout: float = COMMAND_TIMEOUT
                    ) -> PatroniMember:
        """Wait (bounded) until a member other than `other_than` holds the leader key and its postgres
        accepts writes (Patroni's /leader answers 200 from the promotion's start); that member."""
        def found() -> PatroniMember | None:
            return next((m for m in self.members if m is not other_than and m.is_leader() and m.accepts_writes()),
                        None)

        return wait_for(found, "a running Patroni leader", timeout=timeout, interval=0.1, context=self.logs)

    def wait_synchronous(self, timeout: float = COMMAND_TIMEOUT) -> PatroniMember:
        """Wait (bounded) until a leader runs with a streaming synchronous standby; the leader."""
        leader = self.wait_leader(timeout=timeout)
        wait_for(lambda: any(m.is_sync_standby() for m in self.members if m is not leader),
                 "a streaming synchronous standby", timeout=timeout, interval=0.1, context=self.logs)
        return leader

    def create_database(self, name: str) -> str:
        """CREATE DATABASE `name` on the leader; its URL naming every member."""
        with psycopg.connect(self.leader().dsn, autocommit=True, connect_timeout=5) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(name)

    def remove(self) -> None:
        """Kill every member and etcd (process groups), whatever state they are in."""
        for member in self.members:
            with contextlib.suppress(Exception):
                member.kill()
        self.etcd.kill()


@contextlib.contextmanager
def patroni_cluster(members: int = 2, **settings: object) -> Iterator[PatroniCluster]:
    """etcd and `members` Patroni members in synchronous_mode, bootstrapped, removed on exit.

    Returns once one member leads and another is its streaming synchronous standby. `settings` are
    PostgreSQL parameters for every member (on top of private_postgres's fast, non-durable ones;
    synchronous_commit is on, as synchronous_mode needs). Skips the test (fails it under CI=true)
    without Patroni, etcd or the PostgreSQL binaries.
    """
    require_service("Patroni and etcd (Debian packages patroni, etcd-server)",
                    shutil.which("patroni") is not None and shutil.which("etcd") is not None,
                    problem="are not installed")
    bindir = require_binaries()
    root = Path(tempfile.mkdtemp(prefix="reliable-patroni-"))
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chmod(root, 0o755)
    parameters = {**DEFAULT_SETTINGS, "synchronous_commit": "on", **{k: str(v) for k, v in settings.items()}}
    etcd = _Etcd(root)
    member_list = []
    for number in range(1, members + 1):
        directory = root / f"pg{number}"
        directory.mkdir(mode=0o700)
        member_list.append(PatroniMember(f"pg{number}", directory, bindir, etcd, parameters))
        if os.geteuid() == 0:
            for path in (directory, directory / "patroni.yml"):
                os.chown(path, owner.pw_uid, owner.pw_gid)
    cluster = PatroniCluster(etcd, member_list)
    try:
        etcd.start()
        member_list[0].start()  # the first one bootstraps (initdb), then the others clone it
        cluster.wait_leader()
        for member in member_list[1:]:
            member.start()
        cluster.wait_synchronous()
        yield cluster
    finally:
        cluster.remove()
        shutil.rmtree(root, ignore_errors=True)
