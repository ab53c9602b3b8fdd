"""The `reliable` command: operators' entry point."""

from __future__ import annotations

import click

from .. import __version__
from .demo import demo
from .lazy import LazyGroup

#: name -> ("module:command", short help). Listed here so `reliable --help` imports nothing heavy.
COMMANDS: dict[str, tuple[str, str]] = {
    "alerts": ("reliable.cli.alerts:alerts",
               "Alert rules over the state store, Prometheus rule export, Alertmanager delivery."),
    "cancel": ("reliable.cli.control:cancel",
               "Cancel jobs; runs the compensation actor if side effects were applied."),
    "db": ("reliable.cli.db:db",
           "Create or migrate the store's schema; raise its fencing floor (PostgreSQL); prune old history."),
    "dlq": ("reliable.cli.dlq:dlq", "Dead-letter queue (DEAD jobs): list, show, requeue, discard (purge)."),
    "docs": ("reliable.cli.docs:docs", "List the documentation's topics, or print one (Markdown)."),
    "exporter": ("reliable.cli.exporter:exporter",
                 "Serve /metrics (store gauges + workers' metrics), /healthz and the alerts' runbooks."),
    "init": ("reliable.cli.init:init",
             "Copy the shipped policies, alert rules, runbooks and dashboards into a project for editing."),
    "jobs": ("reliable.cli.jobs:jobs", "List, show and trace jobs."),
    "pause": ("reliable.cli.control:pause", "Pause jobs (running ones at their next checkpoint)."),
    "policy": ("reliable.cli.policy:policy", "Validate policy files and explain what a failure would become."),
    "reconcile": ("reliable.cli.control:reconcile",
                  "Resolve REVIEW jobs as succeeded or cancelled. Needs --as."),
    # issue 28 (c28-queues)
    "queues": ("reliable.cli.queues:queues", "Queues: list their figures, pause and resume a whole queue."),
    "recover": ("reliable.cli.recover:recover",
                "Run the recovery loop: expired leases, due retries, lost messages."),
    "restart": ("reliable.cli.control:restart",
                "Run jobs again from the beginning (checkpoint cleared)."),
    "resume": ("reliable.cli.control:resume", "Resume PAUSED or STOPPED jobs from their last checkpoint."),
    "requeue": ("reliable.cli.control:requeue", "Requeue FAILED or DEAD jobs from their last checkpoint."),
    "retry": ("reliable.cli.control:requeue", "Alias of `requeue` (the name every surface uses)."),
    "review": ("reliable.cli.review:review", "Jobs waiting for a person (REVIEW): list, show, resolve."),
    "schedules": ("reliable.cli.schedules:schedules",
                  "Recurring jobs: list, show, pause, resume, trigger, delete, run."),
    "stop": ("reliable.cli.control:stop",
             "Stop jobs (running ones after their current unit)."),
    "tokens": ("reliable.cli.tokens:tokens", "Create, list and revoke API tokens for `reliable web` and --api."),
    "web": ("reliable.cli.web:web", "Serve the HTTP API and the web console."),
    "worker": ("reliable.cli.worker:worker",
               "Run Dramatiq worker processes; restart a crashed one, recycle, report in metrics."),
    "workers": ("reliable.cli.workers:workers", "Worker processes: list (busy threads), quiet, resume, stop."),
    "workflow": ("reliable.cli.workflow:workflow",
                 "Workflows (DAGs of jobs): list, show, pause, stop, cancel, resume only what failed, restart."),
}


@click.group(cls=LazyGroup, lazy=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="reliable")
def cli() -> None:
    """Operate Dramatiq jobs tracked by reliable: state store, jobs, control, recovery.

    Every command but demo needs the state store: --store URL, or set RELIABLE_STORE once (there is
    no default). Times are UTC (2026-12-03T12:08:10Z); a job id may be cut to its first 6 characters.
    """


cli.add_command(demo)


def main() -> None:
    """Console-script entry point."""
    cli()
