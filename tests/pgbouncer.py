"""A PgBouncer of one test, in transaction pooling, in front of the shared PostgreSQL:

    with pgbouncer() as bouncer:
        url = bouncer.pooled(scratch_url)   # the same database through PgBouncer, ?pooled=true

Debian's /usr/sbin/pgbouncer with a configuration of its own in a temporary directory: a free port
on 127.0.0.1, no Unix socket, auth_type=trust (users listed in its auth file), pool_mode =
transaction and a small pool, so that one client's transactions land on different server sessions.
PgBouncer refuses to run as root: as root it runs as the `postgres` OS user. Stopped (SIGTERM, then
SIGKILL) and its directory removed on exit, whatever happened; start-up waits 15 s at most.
Without the binary a test skips, or fails under CI=true (`support.require_service`).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from support import free_port, port_open, require_service, wait_for

__all__ = ["PGBOUNCER", "Bouncer", "pgbouncer"]

PGBOUNCER = "/usr/sbin/pgbouncer"


@dataclass(frozen=True)
class Bouncer:
    """A running PgBouncer: its port, directory and log."""

    port: int
    root: Path

    def url(self, direct: str, **query: str) -> str:
        """The URL of `direct`'s database through this PgBouncer, with `query` added."""
        parsed = make_url(direct).set(host="127.0.0.1", port=self.port)
        return parsed.update_query_dict(query).render_as_string(hide_password=False)

    def pooled(self, direct: str) -> str:
        """`url(direct)` saying it is pooled (`?pooled=true`), as reliable's docs say to write it."""
        return self.url(direct, pooled="true")

    def log(self) -> str:
        """What PgBouncer logged so far."""
        try:
            return (self.root / "pgbouncer.log").read_text(errors="replace")[-3000:]
        except OSError:
            return "(no log)"


@contextlib.contextmanager
def pgbouncer(settings: Mapping[str, object] | None = None) -> Iterator[Bouncer]:
    """Start a PgBouncer in transaction pooling before the shared PostgreSQL (`settings` added to its
    [pgbouncer] section); stop it at exit."""
    require_service("PgBouncer", os.access(PGBOUNCER, os.X_OK), problem=f"is not installed ({PGBOUNCER})")
    require_service("PostgreSQL", port_open("127.0.0.1", 5432))
    root = Path(tempfile.mkdtemp(prefix="reliable-pgbouncer-"))
    bouncer = Bouncer(free_port(), root)
    lines = {"listen_addr": "127.0.0.1", "listen_port": bouncer.port, "unix_socket_dir": "",
             "auth_type": "trust", "auth_file": root / "users.txt", "pool_mode": "transaction",
             "default_pool_size": 4, "max_client_conn": 200, "logfile": root / "pgbouncer.log",
             "pidfile": root / "pgbouncer.pid", "admin_users": "postgres", **(settings or {})}
    (root / "users.txt").write_text('"postgres" ""\n')
    (root / "pgbouncer.ini").write_text("[databases]\n* = host=127.0.0.1 port=5432\n[pgbouncer]\n"
                                        + "".join(f"{key} = {value}\n" for key, value in lines.items()))
    user = None
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        for path in (root, *root.iterdir()):
            os.chown(path, owner.pw_uid, owner.pw_gid)
        user = "postgres"
    process = subprocess.Popen([PGBOUNCER, str(root / "pgbouncer.ini")], user=user, cwd=root,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        def listening() -> bool:
            assert process.poll() is None, f"pgbouncer exited {process.returncode}: {bouncer.log()}"
            return port_open("127.0.0.1", bouncer.port)

        wait_for(listening, "PgBouncer to listen", timeout=15)
        yield bouncer
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
        shutil.rmtree(root, ignore_errors=True)
