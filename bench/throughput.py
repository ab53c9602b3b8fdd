"""Throughput and CPU per job of plain Dramatiq vs Dramatiq + reliable on the same RabbitMQ, in one run.

    .venv/bin/python bench/throughput.py [--jobs 8000] [--runs 5] [--configs 1x8,2x32]
        [--modes plain,reliable-pg,reliable-pg-fast] [--base PATH] [--profile DIR] [--producers 1x8]

Modes: plain, reliable-pg, reliable-pg-ahead (with claims ahead, `claims_ahead=True`; not on a
`--base` tree that lacks the option), reliable-pg-fast (the fast path, its actor on a queue with
durable ones), reliable-pg-fast-queue (the fast path on a queue of fast-path actors only: its
consumer prefetches more for the acknowledgements held until the successes commit,
reliable.worker.acks), reliable-pg-fast-alone (the
fast path reading its jobs one per look, as before the batched look), reliable-pg-nogc (no group commit),
reliable-pg-nometrics, reliable-pg-fullidx (the full job indexes of migration 0006),
reliable-pg-limited (a concurrency limit), reliable-pg-pooled (the worker and the producer reach the
store through a PgBouncer in transaction mode that you start first, at BENCH_PGBOUNCER=host:port,
default 127.0.0.1:6432, with `?pooled=true`: docs/pgbouncer.md), reliable-sqlite, reliable-sqlite-fast.

Producer modes (the sending side alone, no worker): producer-plain (Dramatiq's send), producer-tracked
(reliable installed: each send registers its job first), producer-tracked-async (the same with
`send_commit="asynchronous"`), producer-many (`enqueue_many`, 100 messages a call). Their configuration
PxT is P producer processes of T sending threads each (`--configs 1x1,1x8`: a web request's single
thread, and eight). Each process (bench/producer.py) warms up, then all send N messages in all at
once; the window is the first send's start to the last one's end. Printed: sends/s, the ratio to
producer-plain, each send's (for producer-many each call's) latency p50/p99 in ms, CPU per send.

End-to-end modes (producers and workers at once): e2e-plain, e2e-reliable-pg, e2e-reliable-pg-async
(the producers with `send_commit="asynchronous"`). Their configuration is the worker's, as for the
worker modes; the producers are `--producers PxT` (default 1x8). The window opens when the producers
start sending and closes when the worker has acked every message (and, for reliable, every job is
SUCCEEDED); the ratio is to e2e-plain, CPU per job per role: producer, worker, postgres, rabbitmq.

Each run of a worker mode enqueues N no-op messages (reliable modes register them first, in bulk), starts a real
`dramatiq` worker (processes x threads) and measures the window from the first message started to
the last one finished. The worker processes stamp it themselves (bench/stamps.py): the window starts
at the earliest `before_process_message` of any process and ends at the last ack sent; the run is
over when the processes have acked all N messages (so the queue is empty and nothing is unacked),
and for reliable modes when all N are also SUCCEEDED in the store (if the store lags the acks, the
window ends when it catches up). Modes alternate run by run; medians are printed per worker
configuration, with the ratio to plain Dramatiq.

CPU per job is counted per process over the window only: the driver reads /proc when it sees the
first stamp (within a couple of milliseconds), every 0.1 s, and when the run is over, so start-up
and shutdown CPU are left out (a worker process still booting when the window opens counts from the
end of its boot, when its stamp file appears). Worker = every `dramatiq` process of the run (parent
and children);
producer = the bench/producer.py processes of the run;
postgres = the backends connected to the run's own database (a backend that opens inside the window
counts from zero; the driver's own check of the store is left out); rabbitmq = the whole beam.smp
server, which serves only this run if nothing else uses RabbitMQ on this machine meanwhile (on a
shared machine it includes the others' load: compare it between modes of the same run). Total is
their sum; `cpu ratio` is a mode's total CPU per job over plain Dramatiq's. /proc counts in clock
ticks (10 ms per process), so runs shorter than about a second are coarse.

`switches/job` (`sw/job`): the context switches (voluntary + nonvoluntary, /proc/<pid>/task/*/status)
of every thread of the worker processes inside the window, per job: each is a thread that blocked or
was preempted, and the kernel's switch costs the worker CPU. `--threads` also prints them by Python
thread name (py-spy names the thread ids; digits become N).

`--base PATH` takes a second source tree of reliable (e.g. `git worktree add /tmp/base main`): every
reliable mode M also runs as M@base, right after M in each round, with `PYTHONPATH=PATH:bench` for
the worker and for the step that creates, migrates and fills the store, so that tree's code does
both. That is the before/after of a change in one run, on the same RabbitMQ and PostgreSQL.

`--profile DIR` runs each worker under py-spy (`.venv/bin/pip install py-spy`; sampling at 200 Hz,
non-blocking, every thread of every process) and writes one file per worker process,
`DIR/<config>-run<k>-<mode>-<pid>.txt`, in the collapsed-stack format: one line per distinct stack,
frames from the thread's root to the leaf separated by `;`, then the number of samples. Open one in
https://www.speedscope.app (its "Left Heavy" view shows where the time goes) or turn it into an SVG
with Brendan Gregg's `flamegraph.pl`; `DIR/summary.txt` lists each process's top 15 functions by
samples on top of the stack (self time). Idle threads are not sampled, so the samples approximate
CPU (threads blocked in Python-level waits such as `Condition.wait` may still show). A profile
covers the process's whole life, start-up included: give it enough jobs (e.g. 20,000) that start-up
is a small share. With `BENCH_PROFILE_GIL=1` only the thread holding the GIL is sampled (py-spy
`--gil`): the samples are then the process's Python CPU, blocked waits left out.
Profiling slows the worker: read its figures for where CPU goes, not for rates.

Needs RabbitMQ and (for -pg modes) PostgreSQL on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pika
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool
from stamps import read_stamps

HERE = Path(__file__).parent
BROKER = os.environ.get("BENCH_BROKER", "amqp://guest:guest@127.0.0.1:5672/")
PG_ADMIN = os.environ.get("BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
MODES = ("plain", "reliable-pg", "reliable-pg-ahead", "reliable-pg-fast", "reliable-pg-fast-queue",
         "reliable-pg-fast-alone", "reliable-pg-nogc", "reliable-pg-nometrics", "reliable-pg-fullidx",
         "reliable-pg-limited", "reliable-pg-pooled", "reliable-sqlite", "reliable-sqlite-fast",
         "producer-plain", "producer-tracked", "producer-tracked-async", "producer-many",
         "e2e-plain", "e2e-reliable-pg", "e2e-reliable-pg-async")
#: reliable-pg-pooled: the store reached through a PgBouncer in transaction mode already running here.
PGBOUNCER = os.environ.get("BENCH_PGBOUNCER", "127.0.0.1:6432")
ROLES = ("producer", "worker", "postgres", "rabbitmq")
#: The producer modes' kinds (bench/producer.py's first argument).
PRODUCER_KINDS = {"producer-plain": "plain", "producer-tracked": "tracked", "producer-tracked-async": "tracked-async",
                  "producer-many": "many", "e2e-plain": "plain", "e2e-reliable-pg": "tracked",
                  "e2e-reliable-pg-async": "tracked-async"}
_SWITCHES = re.compile(rb"^(?:non)?voluntary_ctxt_switches:\s+(\d+)", re.MULTILINE)
POLL = 0.002  # seconds between two reads of the stamps
SAMPLE = 0.1  # seconds between two reads of /proc inside the window


@dataclass
class Result:
    """One run: jobs (sends) per second, CPU ms per job by role, mean group-commit batch, worker context
    switches per job and by thread name, latency p50/p99 in ms (producer and end-to-end modes)."""

    rate: float
    per_job: dict[str, float]
    batch: float | None
    switches: float
    by_name: dict[str, int]
    latency: tuple[float, float] | None = None
    samples: int = 0


def proc_cpu(stat: Path) -> float:
    """CPU seconds (user + system) of one process, from its /proc/<pid>/stat."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class WindowCpu:
    """CPU seconds of the run's processes by role (worker, postgres, rabbitmq) between `start` and the last `sample`.

    A process seen at the start counts from its CPU then; one born later counts from zero; one that
    ends before the last sample counts up to the sample before it ended.
    """

    def __init__(self, queue: str, database: str | None, exclude: set[int]) -> None:
        self.worker = f"-Q {queue}"
        self.queue = f" {queue} "
        self.database = f" {database} " if database else None
        self.exclude = exclude
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self.role: dict[int, str] = {}
        self.sampled = 0.0

    def _role(self, pid: int, stat: Path) -> str | None:
        comm = (stat.parent / "comm").read_text().strip()
        if comm == "beam.smp":
            return "rabbitmq"
        cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        if "producer.py" in cmdline and self.queue in cmdline:
            return "producer"
        if comm != "py-spy" and self.worker in cmdline:
            return "worker"
        if self.database and cmdline.startswith("postgres:") and self.database in cmdline and pid not in self.exclude:
            return "postgres"
        return None

    def _read(self) -> dict[int, float]:
        seconds = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            pid = int(stat.parent.name)
            try:
                if pid not in self.role:
                    role = self._role(pid, stat)
                    if role is None:
                        continue
                    self.role[pid] = role
                seconds[pid] = proc_cpu(stat)
            except (OSError, IndexError, ValueError):
                continue
        self.sampled = time.monotonic()
        return seconds

    def start(self) -> None:
        """Open the window: the CPU every process of the run has used so far is left out."""
        self.first = self._read()
        self.last = dict(self.first)

    def rebase(self, pid: int) -> None:
        """Count `pid` from its CPU now: a worker process that finished booting inside the window."""
        try:
            self.first[pid] = self.last[pid] = proc_cpu(Path(f"/proc/{pid}/stat"))
        except (OSError, IndexError, ValueError):
            return
        self.role[pid] = "worker"

    def sample(self) -> None:
        """Read the CPU of the run's processes now (also picks up processes born since the last read)."""
        self.last.update(self._read())

    def seconds(self) -> dict[str, float]:
        """CPU seconds per role inside the window."""
        totals = dict.fromkeys(ROLES, 0.0)
        for pid, seconds in self.last.items():
            totals[self.role[pid]] += seconds - self.first.get(pid, 0.0)
        return totals


def thread_switches(pid: int) -> dict[int, int]:
    """Context switches (voluntary + nonvoluntary) of each thread of `pid` so far, by thread id."""
    counts = {}
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        try:
            counts[int(status.parent.name)] = sum(int(n) for n in _SWITCHES.findall(status.read_bytes()))
        except (OSError, ValueError):
            continue
    return counts


def thread_names(pid: int) -> dict[int, str]:
    """Thread id -> Python thread name of `pid`, from `py-spy dump` (empty without py-spy)."""
    found = shutil.which("py-spy", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if not found:
        return {}
    out = subprocess.run([found, "dump", "--nonblocking", "--pid", str(pid)], capture_output=True, text=True,
                         check=False).stdout
    return {int(tid): re.sub(r"-\d+", "-N", name) for tid, name in re.findall(r'^Thread (\d+) \(\w+\): "(.*)"', out,
                                                                            re.MULTILINE)}


class WindowSwitches:
    """Context switches of the worker processes' threads inside the window (a thread born in it counts
    from zero; one that ends in it is left out), in total and by Python thread name."""

    def __init__(self) -> None:
        self.first: dict[tuple[int, int], int] = {}
        self.last: dict[tuple[int, int], int] = {}
        self.names: dict[tuple[int, int], str] = {}

    @staticmethod
    def _read(pids: list[int]) -> dict[tuple[int, int], int]:
        return {(pid, tid): n for pid in pids for tid, n in thread_switches(pid).items()}

    def start(self, pids: list[int]) -> None:
        """Open the window for the worker processes `pids`."""
        self.first = self._read(pids)

    def rebase(self, pid: int) -> None:
        """Count `pid`'s threads from now (a worker process that finished booting inside the window)."""
        self.first.update(self._read([pid]))

    def stop(self, pids: list[int], named: bool) -> None:
        """Close the window (and, `named`, name the threads with py-spy)."""
        self.last = self._read(pids)
        if named:
            for pid in pids:
                self.names.update({(pid, tid): name for tid, name in thread_names(pid).items()})

    def total(self) -> int:
        """Context switches of every worker thread inside the window."""
        return sum(n - self.first.get(key, 0) for key, n in self.last.items())

    def by_name(self) -> dict[str, int]:
        """Context switches inside the window by thread name (threads py-spy did not name: `?`)."""
        named: dict[str, int] = collections.Counter()
        for key, n in self.last.items():
            named[self.names.get(key, "?")] += n - self.first.get(key, 0)
        return dict(named)


def queue_depth(channel: pika.adapters.blocking_connection.BlockingChannel, queue: str) -> int:
    """Messages ready in `queue` (not counting the unacked ones)."""
    return int(channel.queue_declare(queue, passive=True).method.message_count)


def delete_queues(queue: str) -> None:
    """Delete a run's queue, its delay and dead-letter queues (own connection: a run outlasts heartbeats)."""
    connection = pika.BlockingConnection(pika.URLParameters(BROKER))
    channel = connection.channel()
    for name in (queue, queue + ".DQ", queue + ".XQ"):
        channel.queue_delete(name)
    connection.close()


def create_pg() -> str:
    """A new empty database; its URL."""
    name = f"reliable_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return PG_ADMIN.rsplit("/", 1)[0] + "/" + name


def through_pgbouncer(url: str) -> str:
    """`url`'s database through the PgBouncer at BENCH_PGBOUNCER, declared pooled."""
    host, _, port = PGBOUNCER.rpartition(":")
    parsed = make_url(url).set(host=host, port=int(port)).update_query_dict({"pooled": "true"})
    return parsed.render_as_string(hide_password=False)


def fresh_pg() -> str:
    """A new database with reliable's schema (this tree's migrations); its URL."""
    import reliable

    url = create_pg()
    reliable.StateStore(url).upgrade()
    return url


def full_indexes(url: str) -> None:
    """Replace the partial job indexes (migration 0007) by the full ones of 0006: the A/B of that lever."""
    from reliable.store.schema import PARTIAL_JOB_INDEXES, jobs

    engine = create_engine(url, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with engine.connect() as conn:
        for index in [i for i in jobs.indexes if i.name in PARTIAL_JOB_INDEXES]:
            columns = ", ".join(c.name for c in index.columns)
            conn.execute(text(f"DROP INDEX {index.name}"))
            conn.execute(text(f"CREATE INDEX {index.name} ON reliable_jobs ({columns})"))
    engine.dispose()


def drop_pg(url: str) -> None:
    """Drop a benchmark database, closing its connections."""
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{url.rsplit("/", 1)[1]}" WITH (FORCE)'))
    admin.dispose()


def batch_size(log: Path) -> float | None:
    """The mean group-commit batch of a run, from the worker processes' shutdown lines."""
    writes = batches = 0
    for match in re.finditer(r"group commit: (\d+) writes in (\d+) batches", log.read_text(errors="replace")):
        writes, batches = writes + int(match.group(1)), batches + int(match.group(2))
    return writes / batches if batches else None


def statements_per_job(log: Path, jobs: int) -> str | None:
    """Group commit's writes and batches (statements, commits) per job of a run, and its claims ahead,
    from the worker processes' shutdown lines (None: no group commit)."""
    text = log.read_text(errors="replace")
    counts = [(int(w), int(b)) for w, b in re.findall(r"group commit: (\d+) writes in (\d+) batches", text)]
    if not counts:
        return None
    ahead = re.findall(r"claims ahead: (\d+) claimed, (\d+) taken, (\d+) handed back", text)
    line = (f"group commit {sum(w for w, _ in counts) / jobs:.2f} writes/job in "
            f"{sum(b for _, b in counts) / jobs:.2f} batches/job")
    if ahead:
        totals = [sum(int(found[i]) for found in ahead) for i in range(3)]
        line += "; claims ahead per job: " + ", ".join(
            f"{n / jobs:.2f} {what}" for n, what in zip(totals, ("claimed", "taken", "handed back"), strict=True))
    return line


def _actor_for(mode: str) -> str:
    """The no-op actor a mode runs: on the fast path, with limits (reliable.limits), or plain."""
    return "fast_noop" if "fast" in mode else "limited_noop" if "limited" in mode else "noop"


def prepare(mode: str, queue: str, jobs: int, store_url: str | None) -> None:
    """Migrate the store and enqueue the run's messages with the `reliable` on sys.path (run in a subprocess)."""
    import dramatiq
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    # Confirmed publishes: without them the last messages can be lost when the connection closes
    # right after, and a run then waits for acks of messages RabbitMQ never got.
    broker = RabbitmqBroker(url=BROKER, confirm_delivery=True)
    messages: list[dramatiq.Message[Any]] = [
        dramatiq.Message(queue_name=queue, actor_name=_actor_for(mode), args=(i,), kwargs={}, options={})
        for i in range(jobs)
    ]
    broker.declare_queue(queue)
    if store_url:
        import reliable

        if not Path(reliable.__file__).resolve().is_relative_to(os.environ["BENCH_TREE"]):
            raise SystemExit(f"{mode}: imported {reliable.__file__}, not the tree {os.environ['BENCH_TREE']}")
        reliable.StateStore(store_url).upgrade()
        if "fullidx" in mode:
            full_indexes(store_url)
        middleware = reliable.install(broker, store=store_url, recovery=False, metrics=False, json_logs=False)
        middleware.enqueue_many(broker, messages)
    else:
        for message in messages:
            broker.enqueue(message)
    broker.close()


def descendants(pid: int) -> list[int]:
    """The child processes of `pid` (Linux /proc), nearest first."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        children += [int(child) for child in task.read_text().split()]
    return children


def split_profile(raw: Path, prefix: str) -> dict[int, collections.Counter[str]]:
    """py-spy's `--subprocesses` raw output split per process into `<prefix>-<pid>.txt`; self samples per function."""
    stacks: dict[int, list[str]] = collections.defaultdict(list)
    own: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        last = max(i for i, frame in enumerate(frames) if frame.startswith("process "))
        pid = int(frames[last].split(":", 1)[0].removeprefix("process "))
        if last + 1 < len(frames):
            stacks[pid].append(";".join(frames[last + 1:]) + " " + count)
            own[pid][frames[-1]] += int(count)
    for pid, lines in stacks.items():
        Path(f"{prefix}-{pid}.txt").write_text("\n".join(lines) + "\n")
    raw.unlink()
    return own


def _wait(condition: Callable[[], bool], what: str, timeout: float, worker: subprocess.Popen[bytes],
          log: Path, cpu: WindowCpu | None = None) -> None:
    """Poll `condition` every POLL seconds (sampling `cpu` every SAMPLE) until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if worker.poll() is not None:
            raise RuntimeError(f"worker exited early, see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} within {timeout:.0f} s, see {log}")
        if cpu is not None and time.monotonic() - cpu.sampled >= SAMPLE:
            cpu.sample()
        time.sleep(POLL)


def run_once(mode: str, jobs: int, processes: int, threads: int, tmp: Path, base: Path | None,
             profile: Path | None, tag: str, threads_named: bool = False) -> Result:
    """One run of a worker mode: jobs/s, CPU ms per job per role, mean group-commit batch, worker
    context switches per job, switches by thread name when `threads_named`."""
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    kind = mode.removesuffix("@base")
    tree = base if mode.endswith("@base") and base else HERE.parent.resolve()
    store_url = database = None
    if kind.startswith("reliable-pg"):
        store_url = create_pg()
        database = store_url.rsplit("/", 1)[1]
    elif kind.startswith("reliable-sqlite"):
        store_url = f"sqlite:///{tmp / (queue + '.db')}"
    stamps, multiproc = tmp / f"stamps-{queue}", tmp / f"prom-{queue}"
    stamps.mkdir()
    multiproc.mkdir()
    env = {**os.environ, "BENCH_BROKER": BROKER, "BENCH_QUEUE": queue, "PYTHONPATH": f"{tree}:{HERE}",
           "BENCH_TREE": str(tree), "BENCH_STAMPS": str(stamps),
           "BENCH_MODE": "plain" if kind == "plain" else "reliable",
           "BENCH_METRICS": "0" if "nometrics" in kind else "1",
           "BENCH_GROUP_COMMIT": "0" if kind.endswith("nogc") else "1",
           "BENCH_CLAIMS_AHEAD": "1" if kind.endswith("ahead") else "0",
           "BENCH_LOOKS": "alone" if kind.endswith("alone") else "batched", "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
           "BENCH_FAST_QUEUE": "1" if kind.endswith("fast-queue") else "0"}
    reached = through_pgbouncer(store_url) if store_url and kind.endswith("pooled") else store_url
    if reached:
        env["BENCH_STORE"] = reached
    verify = create_engine(store_url, poolclass=NullPool).connect() if store_url else None
    log = tmp / f"{queue}.log"
    try:
        subprocess.run([sys.executable, __file__, "--prepare", kind, queue, str(jobs), reached or "-"], env=env,
                       check=True)
        command = [sys.executable, "-m", "dramatiq", "bench_app", "-p", str(processes), "-t", str(threads), "-Q", queue]
        prefix = profile / f"{tag}-{mode}" if profile else None
        raw = Path(f"{prefix}.raw") if prefix else None
        if raw:
            gil = ["--gil"] if os.environ.get("BENCH_PROFILE_GIL") == "1" else []
            command = [py_spy(), "record", "--subprocesses", "--nonblocking", "--rate", "200", *gil, "--format", "raw",
                       "--output", str(raw), "--", *command]
        exclude = set()
        if verify is not None and database:
            exclude.add(int(verify.execute(text("SELECT pg_backend_pid()")).scalar_one()))
        cpu = WindowCpu(queue, database, exclude)
        with log.open("wb") as out:
            worker = subprocess.Popen(command, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            _wait(lambda: any(first for first, _, _ in read_stamps(stamps).values()), "first message", 120, worker,
                  log)
            cpu.start()
            switches = WindowSwitches()
            booted = set(read_stamps(stamps))
            switches.start(list(booted))

            def all_acked() -> bool:
                now = read_stamps(stamps)
                for pid in now.keys() - booted:  # its boot CPU is not the jobs'
                    cpu.rebase(pid)
                    switches.rebase(pid)
                    booted.add(pid)
                return sum(acks for _, _, acks in now.values()) >= jobs

            _wait(all_acked, "last ack", 600, worker, log, cpu)
            acked = time.monotonic()
            if verify is not None:  # finished = SUCCEEDED in the store, not only acked
                count = text("SELECT count(*) FROM reliable_jobs WHERE status = 'SUCCEEDED'")
                _wait(lambda: verify.execute(count).scalar_one() >= jobs, "SUCCEEDED for every job", 120, worker, log,
                      cpu)
            stored = time.monotonic()
            cpu.sample()
            switches.stop(list(booted), threads_named)
        finally:
            stop(worker, bool(raw))
        done = read_stamps(stamps).values()
        start = min(first for first, _, _ in done if first)
        end = max(last for _, last, _ in done)
        if stored - acked > POLL * 5:  # the store lagged the acks: the window ends when it caught up
            print(f"{mode}: SUCCEEDED {1000 * (stored - acked):.0f} ms after the last ack", file=sys.stderr)
            end = stored
        seconds = cpu.seconds()
        if raw and prefix:
            for pid, own in split_profile(raw, str(prefix)).items():
                with (prefix.parent / "summary.txt").open("a") as summary:
                    summary.write(f"{prefix.name}-{pid}: top functions by self samples\n")
                    summary.writelines(f"{n:8d}  {frame}\n" for frame, n in own.most_common(15))
    finally:
        if verify is not None:
            verify.close()
        delete_queues(queue)
        if database and store_url:
            drop_pg(store_url)
    per_job = {role: 1000 * value / jobs for role, value in seconds.items()}
    if (statements := statements_per_job(log, jobs)) is not None:
        print(f"{mode}: {statements}", file=sys.stderr, flush=True)
    return Result(jobs / (end - start), per_job, batch_size(log), switches.total() / jobs, switches.by_name())

def start_producers(kind: str, queue: str, jobs: int, processes: int, threads: int, store_url: str | None,
                    directory: Path, env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    """Start `processes` bench/producer.py processes sending `jobs` messages in all; return once each
    has warmed up (they wait for `directory/go`)."""
    shares = [jobs // processes + (1 if i < jobs % processes else 0) for i in range(processes)]
    log = (directory / "producers.log").open("ab")
    producers = [subprocess.Popen([sys.executable, str(HERE / "producer.py"), kind, queue, str(share), str(threads),
                                   store_url or "-", str(directory)], cwd=HERE, env=env, stdout=log,
                                  stderr=subprocess.STDOUT) for share in shares]
    deadline = time.monotonic() + 120
    while len(list(directory.glob("*.ready"))) < processes:
        if any(p.poll() not in (None, 0) for p in producers) or time.monotonic() > deadline:
            for producer in producers:
                producer.kill()
            raise RuntimeError(f"a producer did not start, see {directory / 'producers.log'}")
        time.sleep(POLL)
    return producers


def warm_up_sends(kind: str, processes: int, threads: int) -> int:
    """The messages bench/producer.py sends before the run (they reach the worker too)."""
    import producer

    return processes * threads * (producer.BULK if kind == "many" else producer.WARM_UP)


def end_run(producers: list[subprocess.Popen[bytes]], worker: subprocess.Popen[bytes] | None, verify: Any,
            queue: str, store_url: str | None) -> None:
    """Clean up after a producer or end-to-end run: its processes, queues and database."""
    for producer in producers:
        if producer.poll() is None:
            producer.kill()
    if worker is not None:
        stop(worker, False)
    if verify is not None:
        verify.close()
    delete_queues(queue)
    if store_url:
        drop_pg(store_url)


def producer_results(directory: Path) -> tuple[float, float, list[float]]:
    """(first start, last end, every latency) of the run's producers."""
    results = [json.loads(path.read_text()) for path in directory.glob("*.json")]
    latencies = [value for result in results for value in result["latencies"]]
    return min(r["start"] for r in results), max(r["end"] for r in results), latencies


def run_producers(mode: str, jobs: int, processes: int, threads: int, tmp: Path, base: Path | None) -> Result:
    """One run of a producer mode: PxT sending threads, no worker (see the module doc)."""
    kind = PRODUCER_KINDS[mode.removesuffix("@base")]
    tree = base if mode.endswith("@base") and base else HERE.parent.resolve()
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    directory = tmp / f"producers-{queue}"
    directory.mkdir()
    store_url = database = None
    env = {**os.environ, "BENCH_BROKER": BROKER, "PYTHONPATH": f"{tree}:{HERE}"}
    if kind != "plain":
        store_url = create_pg()
        database = store_url.rsplit("/", 1)[1]
        subprocess.run([sys.executable, "-c", f"import reliable; reliable.StateStore({store_url!r}).upgrade()"],
                       env=env, check=True)
    producers: list[subprocess.Popen[bytes]] = []
    try:
        producers = start_producers(kind, queue, jobs, processes, threads, store_url, directory, env)
        cpu = WindowCpu(queue, database, set())
        cpu.start()
        (directory / "go").write_text("")
        deadline = time.monotonic() + 600
        while any(p.poll() is None for p in producers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{mode}: the producers did not finish within 600 s")
            if time.monotonic() - cpu.sampled >= SAMPLE:
                cpu.sample()
            time.sleep(POLL)
        if any(p.returncode != 0 for p in producers):
            raise RuntimeError(f"{mode}: a producer failed, see {directory / 'producers.log'}")
        start, end, latencies = producer_results(directory)
        seconds = cpu.seconds()
    finally:
        end_run(producers, None, None, queue, store_url)
    per_send = {role: 1000 * value / jobs for role, value in seconds.items()}
    return Result(jobs / (end - start), per_send, None, 0.0, {}, percentiles(latencies), len(latencies))


def percentiles(latencies: list[float]) -> tuple[float, float]:
    """(p50, p99) of `latencies` (seconds) in ms."""
    ordered = sorted(latencies)
    return 1000 * ordered[len(ordered) // 2], 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def run_e2e(mode: str, jobs: int, processes: int, threads: int, tmp: Path, base: Path | None,
            producers_config: tuple[int, int], threads_named: bool = False) -> Result:
    """One run of an end-to-end mode: the producers send while a PxT worker consumes (see the module doc)."""
    kind = PRODUCER_KINDS[mode.removesuffix("@base")]
    tree = base if mode.endswith("@base") and base else HERE.parent.resolve()
    queue = f"bench_{uuid.uuid4().hex[:8]}"
    directory, stamps, multiproc = tmp / f"producers-{queue}", tmp / f"stamps-{queue}", tmp / f"prom-{queue}"
    for path in (directory, stamps, multiproc):
        path.mkdir()
    store_url = database = None
    env = {**os.environ, "BENCH_BROKER": BROKER, "BENCH_QUEUE": queue, "PYTHONPATH": f"{tree}:{HERE}",
           "BENCH_TREE": str(tree), "BENCH_STAMPS": str(stamps), "PROMETHEUS_MULTIPROC_DIR": str(multiproc),
           "BENCH_MODE": "plain" if kind == "plain" else "reliable"}
    if kind != "plain":
        store_url = create_pg()
        database = store_url.rsplit("/", 1)[1]
        env["BENCH_STORE"] = store_url
        subprocess.run([sys.executable, "-c", f"import reliable; reliable.StateStore({store_url!r}).upgrade()"],
                       env=env, check=True)
    total = jobs + warm_up_sends(kind, *producers_config)
    verify = create_engine(store_url, poolclass=NullPool).connect() if store_url else None
    log = tmp / f"{queue}.log"
    producers: list[subprocess.Popen[bytes]] = []
    worker: subprocess.Popen[bytes] | None = None
    try:
        exclude = set()
        if verify is not None:
            exclude.add(int(verify.execute(text("SELECT pg_backend_pid()")).scalar_one()))
        with log.open("wb") as out:
            worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "bench_app", "-p", str(processes), "-t",
                                       str(threads), "-Q", queue], cwd=HERE, env=env, stdout=out,
                                      stderr=subprocess.STDOUT)
        producers = start_producers(kind, queue, jobs, *producers_config, store_url, directory, env)
        running = worker
        _wait(lambda: len(read_stamps(stamps)) >= processes, "worker boot", 120, running, log)
        _wait(lambda: sum(acks for _, _, acks in read_stamps(stamps).values()) >= total - jobs, "warm-up acks", 120,
              running, log)
        cpu = WindowCpu(queue, database, exclude)
        cpu.start()
        switches = WindowSwitches()
        booted = list(read_stamps(stamps))
        switches.start(booted)
        (directory / "go").write_text("")
        _wait(lambda: sum(acks for _, _, acks in read_stamps(stamps).values()) >= total, "last ack", 600, running,
              log, cpu)
        if verify is not None:
            count = text("SELECT count(*) FROM reliable_jobs WHERE status = 'SUCCEEDED'")
            _wait(lambda: verify.execute(count).scalar_one() >= total, "SUCCEEDED for every job", 120, running, log,
                  cpu)
        done = time.monotonic()
        cpu.sample()
        switches.stop(booted, threads_named)
        for producer in producers:
            producer.wait(60)
        start, _, latencies = producer_results(directory)
        seconds = cpu.seconds()
    finally:
        end_run(producers, worker, verify, queue, store_url)
    per_job = {role: 1000 * value / jobs for role, value in seconds.items()}
    return Result(jobs / (done - start), per_job, batch_size(log), switches.total() / jobs, switches.by_name(),
                  percentiles(latencies), len(latencies))



def py_spy() -> str:
    """The py-spy executable (next to this Python, or on PATH)."""
    found = shutil.which("py-spy", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    if not found:
        raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")
    return found


def stop(worker: subprocess.Popen[bytes], profiled: bool) -> None:
    """Stop the worker gracefully; under py-spy, stop the dramatiq parent so py-spy writes its file and exits."""
    if worker.poll() is None:
        targets = descendants(worker.pid)[:1] if profiled else [worker.pid]
        for pid in targets or [worker.pid]:
            os.kill(pid, signal.SIGTERM)
    worker.wait(60)


def parse_configs(text: str) -> list[tuple[int, int]]:
    """`1x8,2x32` -> [(1, 8), (2, 32)]: worker processes x threads per process."""
    configs = []
    for item in text.split(","):
        processes, _, threads = item.strip().partition("x")
        if not (processes.isdigit() and threads.isdigit()) or int(processes) < 1 or int(threads) < 1:
            raise SystemExit(f"--configs: {item!r} is not PROCESSESxTHREADS (e.g. 2x8)")
        configs.append((int(processes), int(threads)))
    return configs


def parse_modes(text: str, base: Path | None) -> list[str]:
    """The modes of `--modes`, each reliable one followed by its @base twin when `--base` is given."""
    modes = []
    for mode in text.split(","):
        if mode.strip() not in MODES:
            raise SystemExit(f"--modes: {mode!r} is not one of {', '.join(MODES)}")
        modes.append(mode.strip())
        if base and not mode.strip().endswith(("plain", "-async")):  # a base tree may lack send_commit
            modes.append(mode.strip() + "@base")
    return modes


def baseline(mode: str) -> str:
    """The plain mode a mode's ratio is taken to: producer-plain, e2e-plain or plain."""
    family = mode.split("-", 1)[0]
    return f"{family}-plain" if family in ("producer", "e2e") else "plain"


def bench_config(modes: list[str], jobs: int, runs: int, processes: int, threads: int, tmp: Path, base: Path | None,
                 profile: Path | None, threads_named: bool = False, producers: tuple[int, int] = (1, 8)) -> None:
    """Alternate the modes `runs` times at -p processes -t threads; print each run and the medians."""
    results: dict[str, list[Result]] = {mode: [] for mode in modes}
    for run in range(runs):
        for mode in modes:
            tag = f"{processes}x{threads}-run{run + 1}"
            kind = mode.removesuffix("@base")
            if kind.startswith("producer-"):
                result = run_producers(mode, jobs, processes, threads, tmp, base)
            elif kind.startswith("e2e-"):
                result = run_e2e(mode, jobs, processes, threads, tmp, base, producers, threads_named)
            else:
                result = run_once(mode, jobs, processes, threads, tmp, base, profile, tag, threads_named)
            results[mode].append(result)
            latency = f"  p50 {result.latency[0]:.2f} p99 {result.latency[1]:.2f} ms" if result.latency else ""
            print(f"-p {processes} -t {threads} run {run + 1}/{runs} {mode:>24}: {result.rate:8.0f} jobs/s  "
                  + "  ".join(f"{role} {result.per_job[role]:.2f} ms CPU/job" for role in ROLES)
                  + f"  total {sum(result.per_job.values()):.2f}"
                  + (f"  batch {result.batch:.1f}" if result.batch is not None else "")
                  + f"  switches/job {result.switches:.1f}" + latency, flush=True)
            if threads_named and result.by_name:
                print("    switches/job by thread: " + ", ".join(
                    f"{name} {n / jobs:.2f}" for name, n in sorted(result.by_name.items(), key=lambda item: -item[1])),
                    flush=True)
    medians = {mode: {role: statistics.median(r.per_job[role] for r in rs) for role in ROLES}
               for mode, rs in results.items()}
    rates = {mode: statistics.median(r.rate for r in rs) for mode, rs in results.items()}
    print(f"\n{jobs} no-op jobs, -p {processes} -t {threads} (producer modes: producer processes x threads; "
          f"end-to-end: the worker's, producers {producers[0]}x{producers[1]}), median of {runs} alternating runs, "
          "ms CPU per job")
    print(f"{'mode':>24} {'jobs/s':>8} {'ratio':>6} {'producer':>8} {'worker':>7} {'postgres':>8} {'rabbitmq':>8} "
          f"{'total':>6} {'cpu ratio':>9} {'batch':>6} {'sw/job':>6} {'p50 ms':>7} {'p99 ms':>7}")
    for mode, rs in results.items():
        plain = baseline(mode.removesuffix("@base"))
        ratio = f"{rates[mode] / rates[plain]:5.2f}x" if plain in rates else "-"
        total = sum(medians[mode].values())
        plain_cpu = sum(medians[plain].values()) if plain in medians else None
        cpu_ratio = f"{total / plain_cpu:8.2f}x" if plain_cpu else "-"
        found = [r.batch for r in rs if r.batch is not None]
        mean_batch = f"{statistics.median(found):6.1f}" if found else f"{'-':>6}"
        timed = [r.latency for r in rs if r.latency is not None]
        latency = (f" {statistics.median(t[0] for t in timed):7.2f} {statistics.median(t[1] for t in timed):7.2f}"
                   if timed else f" {'-':>7} {'-':>7}")
        print(f"{mode:>24} {rates[mode]:8.0f} {ratio:>6} " + " ".join(
            f"{medians[mode][r]:{w}.2f}" for r, w in zip(ROLES, (8, 7, 8, 8), strict=True))
              + f" {total:6.2f} {cpu_ratio:>9} {mean_batch} {statistics.median(r.switches for r in rs):6.1f}"
              + latency)
    print(flush=True)


def main() -> None:
    """Parse the arguments and run every configuration."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--configs", default="1x8,2x32", help="worker processes x threads, comma-separated")
    parser.add_argument("--modes", default="plain,reliable-pg,reliable-pg-fast")
    parser.add_argument("--base", type=Path, help="a second source tree of reliable: its modes run as MODE@base")
    parser.add_argument("--profile", type=Path, help="run the workers under py-spy; one stack file per process here")
    parser.add_argument("--producers", default="1x8",
                        help="end-to-end modes: producer processes x sending threads (default 1x8)")
    parser.add_argument("--threads", action="store_true",
                        help="also print each run's worker context switches per job by thread name (py-spy names them)")
    parser.add_argument("--prepare", nargs=4, help=argparse.SUPPRESS)  # MODE QUEUE JOBS STORE_URL|-, in a subprocess
    args = parser.parse_args()
    if args.prepare:
        mode, queue, jobs, store_url = args.prepare
        prepare(mode, queue, int(jobs), None if store_url == "-" else store_url)
        return
    base = args.base.resolve() if args.base else None
    if base and not (base / "reliable" / "__init__.py").is_file():
        raise SystemExit(f"--base: {base} has no reliable/__init__.py (give the root of a source tree of reliable)")
    if args.profile:
        py_spy()
        args.profile.mkdir(parents=True, exist_ok=True)
    modes = parse_modes(args.modes, base)
    producers = parse_configs(args.producers)[0]
    with tempfile.TemporaryDirectory() as tmp:
        for processes, threads in parse_configs(args.configs):
            bench_config(modes, args.jobs, args.runs, processes, threads, Path(tmp), base, args.profile.resolve()
                         if args.profile else None, args.threads, producers)


if __name__ == "__main__":
    main()
