"""`reliable recover`: the recovery loop as its own process."""

from __future__ import annotations

import os
import socket
from dataclasses import asdict

import click

from .common import (
    BROKER_QUEUES_HELP,
    DURATION,
    POSITIVE_DURATION,
    emit_json,
    handle_errors,
    open_store,
    rabbitmq_broker,
    repeat,
    store_option,
)


@click.command()
@store_option
@click.option("--broker", "broker_url", envvar="RELIABLE_BROKER", show_envvar=True,
              help="RabbitMQ URL (amqp://...) to re-publish messages on. Without it jobs are moved in the "
                   "store only and a worker's sweeper publishes them." + BROKER_QUEUES_HELP)
@click.option("--policies", type=click.Path(exists=True), envvar="RELIABLE_POLICIES", show_envvar=True,
              help="Policy file or directory (crash decisions, lease settings). Default: built-in policy.")
@click.option("--once", is_flag=True, help="Run one pass and exit (for cron or a test).")
@click.option("--interval", type=POSITIVE_DURATION, default=None,
              help="Time between passes (5s, 1m or seconds) [default: the policy's lease.recovery_interval].")
@click.option("--sweep-after", type=DURATION, default=None,
              help="Re-publish PENDING jobs not claimed this long after dispatch (5m, 90s or seconds) "
                   "[default: the policy's].")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object per pass, one per line: {expired: {job_id: event}, retried, "
                   "redispatched, lost_races, expiry_held}.")
@handle_errors
def recover(store_url: str, broker_url: str | None, policies: str | None, once: bool, interval: float | None,
            sweep_after: float | None, as_json: bool) -> None:
    """Run the recovery loop: expired leases, due retries, lost messages.

    Every worker process already runs this loop unless installed with recovery=False; a separate
    `reliable recover` is for deployments that turn it off in workers. Several may run at once:
    each step is a compare-and-set on the job row.
    """
    from ..policy import Policy
    from ..recovery import Recovery, RecoveryReport

    store = open_store(store_url)
    policy = Policy.load(policies)
    broker = None
    if broker_url:
        broker = rabbitmq_broker(url=broker_url)
    loop = Recovery(store, broker, policy, sweep_after=sweep_after,
                    worker_id=f"reliable-recover@{socket.gethostname()}:{os.getpid()}")
    pause = interval if interval is not None else policy.lease.recovery_interval

    def show(report: RecoveryReport) -> None:
        if as_json:
            emit_json(asdict(report), one_line=True)
            return
        held = " (lease expiry held: the store came back less than a lease TTL ago)" if report.expiry_held else ""
        click.echo(f"recovered {len(report.expired)} expired leases, promoted {len(report.retried)} retries, "
                   f"re-published {len(report.redispatched)} lost messages ({report.lost_races} lost races){held}")

    # The loop holds lease expiry for a TTL once the store answers again (`Recovery`).
    repeat(loop.run_once, show, interval=pause, once=once)
