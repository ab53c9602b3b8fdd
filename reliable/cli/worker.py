"""`reliable worker`: run Dramatiq worker processes under a supervisor that restarts a crashed one."""

from __future__ import annotations

import os
import sys

import click

from ..errors import ConfigError
from .common import POSITIVE_DURATION, handle_errors

__all__ = ["worker"]

EXIT_CODES_HELP = ("Exit status: 0 stopped by TERM/INT after every child finished its running jobs; 1 stopped, but "
                   "some child may have left jobs unfinished (a second TERM/INT, a child killed or past "
                   "--shutdown-timeout during the stop); 2 bad usage, the app failed to import, or a configuration "
                   "error at a child's boot (e.g. the store's database, credentials or schema: the child's error "
                   "line says what to fix or run); 3 crash loop "
                   "(K crashes within the window: every child stopped).")


def _crash_loop(ctx: click.Context, param: click.Parameter, value: str) -> object:
    from ..supervisor import parse_crash_loop

    try:
        return parse_crash_loop(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


@click.command(short_help="Run Dramatiq worker processes; restart a crashed one, recycle, report in metrics.",
               epilog=EXIT_CODES_HELP)
@click.argument("app")
@click.argument("modules", nargs=-1)
@click.option("--processes", "-p", type=click.IntRange(min=1), default=os.cpu_count() or 1, show_default=True,
              help="Child worker processes.")
@click.option("--threads", "-t", type=click.IntRange(min=1), default=8, show_default=True,
              help="Worker threads per child.")
@click.option("--queues", "-Q", multiple=True, help="Consume only this queue (repeat for several) [default: all].")
@click.option("--path", "-P", "paths", multiple=True, default=(".",), show_default=True,
              help="Directory put first on the import path (repeatable).")
@click.option("--max-jobs", type=click.IntRange(min=1), default=None,
              help="Recycle a child after it processed this many jobs (graceful: its running jobs finish).")
@click.option("--max-memory", type=click.FloatRange(min=0, min_open=True), default=None, metavar="MB",
              help="Recycle a child whose resident memory passes this many MB (graceful; Linux /proc).")
@click.option("--crash-loop", default="5/60s", show_default=True, callback=_crash_loop, metavar="K/DURATION",
              help="K crashes within DURATION stop every child and exit 3.")
@click.option("--restart-backoff", type=POSITIVE_DURATION, default="500ms", show_default=True,
              help="Delay before restarting a crashed child, doubled for each crash in a row (at most 30s).")
@click.option("--boot-timeout", type=POSITIVE_DURATION, default="2m", show_default=True,
              help="A child not consuming this long after its start is killed (a crash).")
@click.option("--shutdown-timeout", type=POSITIVE_DURATION, default="10m", show_default=True,
              help="How long a stopping child waits for its running jobs (Dramatiq's --worker-shutdown-timeout, "
                   "as a duration); a job still running then is abandoned (its lease recovers it); a child still "
                   "stopping 15s later is stopped at once.")
@click.option("--metrics-port", type=click.IntRange(min=0, max=65535), default=None,
              help="Serve the supervisor's metrics on this port (/metrics).")
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address for --metrics-port.")
@click.option("--metrics-file", type=click.Path(dir_okay=False), default=None,
              help="Write the supervisor's metrics to this file at every change (node_exporter textfile).")
@click.option("--multiprocess-dir", envvar="PROMETHEUS_MULTIPROC_DIR", show_envvar=True,
              type=click.Path(file_okay=False),
              help="Where the children and the supervisor keep their metrics for `reliable exporter` (which "
                   "finds it by the store the children use). Default: one directory per APP (and first --path) "
                   "under /tmp/reliable-metrics-<uid>, created private.")
@click.option("--verbose", "-v", is_flag=True, help="Debug logs in the children.")
@handle_errors
def worker(app: str, modules: tuple[str, ...], processes: int, threads: int, queues: tuple[str, ...],
           paths: tuple[str, ...], max_jobs: int | None, max_memory: float | None, crash_loop: object,
           restart_backoff: float, boot_timeout: float, shutdown_timeout: float, metrics_port: int | None,
           metrics_host: str, metrics_file: str | None, multiprocess_dir: str | None, verbose: bool) -> None:
    """Run Dramatiq worker processes; restart a crashed one, recycle, report in metrics.

    APP is what `dramatiq` takes: `module` (its broker is the one set with dramatiq.set_broker),
    `module:broker` or `module:setup_function`; MODULES are imported too. Unlike `dramatiq`, a child
    that dies is replaced (after a backoff) while the others keep running; K crashes within the
    window (--crash-loop) stop everything. A child is recycled (finishes its running jobs, exits,
    is replaced) after --max-jobs jobs or over --max-memory MB.

    Signals: TERM or INT stops every child after its running jobs (a child takes any number of
    TERMs as one: systemd's KillMode=control-group is safe; KillMode=mixed is advised); a second
    one to the supervisor stops them at once (SIGUSR1 to each; their jobs are recovered by lease);
    HUP restarts the children one at a time, with the app's code imported anew. Events are JSON
    lines on stderr (logger reliable.worker). See `reliable docs worker`.
    """
    from prometheus_client import CollectorRegistry

    from ..events import log_events_to_stderr
    from ..multiprocess import compact, default_dir, join
    from ..supervisor import Backoff, CrashWindow, Supervisor, SupervisorConfig, SupervisorMetrics
    from ..supervisor.supervisor import LOGGER_NAME

    assert isinstance(crash_loop, CrashWindow)
    if max_memory is not None and not os.path.exists("/proc/self/statm"):
        raise ConfigError("--max-memory reads a child's resident memory from /proc: not available on this system")
    config = SupervisorConfig(
        app=app, modules=modules, queues=queues or None, processes=processes, threads=threads, paths=paths,
        max_jobs=max_jobs, max_memory_mb=max_memory, crash_loop=crash_loop,
        backoff=Backoff(initial=restart_backoff, maximum=max(30.0, restart_backoff)), boot_timeout=boot_timeout,
        shutdown_timeout=shutdown_timeout, log_level="DEBUG" if verbose else "INFO",
    )
    log_events_to_stderr(LOGGER_NAME)
    # Before any collector exists: the supervisor's counters and its children's (they inherit the
    # variable) go to the host's directory, where `reliable exporter` adds them up.
    compact(join(multiprocess_dir or default_dir(app, paths[0] if paths else ".")))
    metrics = SupervisorMetrics(CollectorRegistry(), processes)
    if metrics_port is not None:
        try:
            metrics.serve(metrics_port, metrics_host)
        except OSError as exc:
            raise ConfigError(f"--metrics-port {metrics_port}: cannot listen on {metrics_host}: {exc}") from None

    def write() -> None:
        if metrics_file is not None:
            metrics.write_textfile(metrics_file)

    write()
    supervisor = Supervisor(config, metrics, on_change=write)
    code = supervisor.run()
    try:
        write()
    except OSError as exc:  # the exit code says how the children stopped; a stale file must not change it
        click.echo(f"warning: --metrics-file {metrics_file}: {exc}", err=True)
    if supervisor.failure:
        click.echo(f"error: {supervisor.failure}", err=True)
    sys.exit(code)
