"""RabbitMQ nodes of the tests' own, on this machine: started, clustered, stopped and removed here.

Each node has its own name (`rt<hex>-<n>@localhost`), AMQP and distribution ports, data and log
directories and no plugins; they share an Erlang cookie through a HOME of their own (the shared
node `rabbit@<host>` on 5672 is never touched: every rabbitmqctl call names our node with -n).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from support import free_port, require_service

BIN = Path(os.environ.get("RELIABLE_TEST_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
SERVER, CTL, QUEUES = BIN / "rabbitmq-server", BIN / "rabbitmqctl", BIN / "rabbitmq-queues"
BOOT_TIMEOUT = 90.0


class RabbitNode:
    """One rabbitmq-server process (its own process group) under `root`."""

    def __init__(self, root: Path, name: str, *, config: str = "", erl_args: str = "") -> None:
        self.root, self.name = root, name
        self.port, self.dist_port = free_port(), free_port()
        self.dir = root / name.split("@")[0]
        self.dir.mkdir(parents=True)
        (self.dir / "node.conf").write_text(f"loopback_users = none\nlisteners.tcp.1 = 127.0.0.1:{self.port}\n{config}")
        self.env = {
            **os.environ, "HOME": str(root / "home"), "RABBITMQ_NODENAME": name,
            "RABBITMQ_NODE_PORT": str(self.port), "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(self.dir / "mnesia"), "RABBITMQ_LOG_BASE": str(self.dir / "log"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(root / "enabled_plugins"),
            "RABBITMQ_CONFIG_FILE": str(self.dir / "node"), "RABBITMQ_PID_FILE": str(self.dir / "node.pid"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": erl_args,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Its AMQP URL."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/%2F?heartbeat=10&connection_attempts=3&retry_delay=0.5"

    def start(self) -> None:
        """Start the server process (returns at once: `wait_started`)."""
        with (self.dir / "server.out").open("ab") as out:
            self.proc = subprocess.Popen([str(SERVER)], env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=self.dir)

    def ctl(self, *args: str, timeout: float = 60.0, tool: Path = CTL) -> str:
        """Run rabbitmqctl (or `tool`) against this node; its output; raises on failure."""
        # cwd: Erlang writes Mnesia.<node> / MnesiaCore dumps into the working directory.
        done = subprocess.run([str(tool), "-n", self.name, *args], env=self.env, capture_output=True, text=True,
                              timeout=timeout, cwd=self.dir)
        if done.returncode != 0:
            raise RuntimeError(f"{tool.name} -n {self.name} {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    def wait_started(self, deadline: float) -> None:
        """Wait until the node runs its apps (failing at `deadline`, with the log tail)."""
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"node {self.name} exited: {self.tail()}")
            try:
                self.ctl("await_startup", "-t", "5", timeout=15)
                return
            except (RuntimeError, subprocess.TimeoutExpired):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"node {self.name} did not start in time: {self.tail()}") from None
                time.sleep(0.2)  # between polls of a condition, with a deadline

    def join(self, seed: RabbitNode, attempts: int = 3) -> None:
        """Join `seed`'s cluster (stop_app, join_cluster, start_app). A join that Mnesia aborts
        (seen when the seed is busy: `{aborted, ... schema_prepare}`) is tried again from a reset
        node, up to `attempts` times."""
        self.ctl("stop_app")
        for attempt in range(1, attempts + 1):
            try:
                self.ctl("join_cluster", seed.name)
                break
            except RuntimeError:
                if attempt == attempts:
                    raise
                self.ctl("reset")  # a half-done join leaves schema state behind: start it clean
        self.ctl("start_app")

    def kill(self) -> None:
        """SIGKILL the node's process group (a crash: no goodbye to its peers or clients)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """Stop the node (gracefully, bounded; then kill)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            self.ctl("stop", timeout=30)
            self.proc.wait(30)
        except (RuntimeError, subprocess.TimeoutExpired):
            pass
        self.kill()

    def tail(self, lines: int = 15) -> str:
        """The end of the node's output."""
        out = self.dir / "server.out"
        return "\n".join(out.read_text(errors="replace").splitlines()[-lines:]) if out.exists() else ""


def _prepared_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="reliable-rmq-"))
    (root / "home").mkdir()
    cookie = root / "home" / ".erlang.cookie"
    cookie.write_text(uuid.uuid4().hex.upper())
    cookie.chmod(0o400)
    (root / "enabled_plugins").write_text("[].\n")
    return root


@contextmanager
def rabbit_nodes(count: int, *, config: str = "", erl_args: str = "", cluster: bool = True
                 ) -> Iterator[Sequence[RabbitNode]]:
    """`count` fresh nodes (joined into one cluster when `cluster`), stopped and removed after."""
    require_service("rabbitmq-server", SERVER.exists() and shutil.which("erl") is not None, problem="is not installed")
    root = _prepared_root()
    tag = uuid.uuid4().hex[:6]
    nodes = [RabbitNode(root, f"rt{tag}-{i}@localhost", config=config, erl_args=erl_args) for i in range(count)]
    try:
        for node in nodes:
            node.start()
        deadline = time.monotonic() + BOOT_TIMEOUT
        for node in nodes:
            node.wait_started(deadline)
        if cluster:
            for node in nodes[1:]:  # one at a time: joins in parallel make Mnesia abort one of them
                node.join(nodes[0])
            running = nodes[0].ctl("eval", "length(rabbit_nodes:all_running()).").strip()
            assert running == str(count), f"cluster has {running} running nodes, expected {count}"
        yield nodes
    finally:
        for node in nodes:
            node.kill()
        shutil.rmtree(root, ignore_errors=True)
