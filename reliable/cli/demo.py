"""`reliable demo`: the whole story in about a minute, on the embedded default or on real services.

Only click is imported here; the demo's modules (Dramatiq, SQLAlchemy, rich) load when it runs,
so `reliable --help` stays fast.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click

__all__ = ["demo"]


@click.command()
@click.option("--store", "store_url", metavar="URL",
              help="State store URL [default: SQLite in a new temporary directory]. With --broker, use "
                   "postgresql+psycopg://USER@HOST/DB for the real thing.")
@click.option("--broker", "broker_url", metavar="AMQP_URL",
              help="RabbitMQ URL: run real `dramatiq` worker processes (and a real kill -9) instead of "
                   "the in-process StubBroker.")
@click.option("--live/--no-live", default=None,
              help="Live view (a job table and a log) or plain lines [default: live on a terminal].")
@click.option("--speed", type=click.FloatRange(0.5, 3.0), default=1.0, show_default=True,
              help="Play the story faster (2) or slower (0.5).")
@click.option("--alertmanager", metavar="URL", help="Also deliver the demo's alerts to this Alertmanager (API v2).")
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path),
              help="Where the policy, alert rules and logs go [default: a new temporary directory].")
def demo(store_url: str | None, broker_url: str | None, live: bool | None, speed: float,
         alertmanager: str | None, workdir: Path | None) -> None:
    """Play the whole story in about a minute (no services needed by default).

    Retries with backoff, a 429, invalid input, a payment in REVIEW, pause/resume, a worker crash,
    a dead job requeued and an alert with its runbook, all recorded by the real middleware.

    With no options it needs no services: SQLite, Dramatiq's in-process StubBroker and worker
    threads (the worker crash is simulated and says so). With --broker amqp://... --store
    postgresql+psycopg://... the same story runs on RabbitMQ and PostgreSQL with real worker
    processes, one of them killed with SIGKILL. Exit status 0 only if every job ended in the state
    the story expects (checked against the store).
    """
    from reliable.errors import ReliableError

    from ..demo.config import DemoSettings
    from ..demo.runner import Director
    from ..demo.view import make_view

    directory = workdir or Path(tempfile.mkdtemp(prefix="reliable-demo-"))
    directory.mkdir(parents=True, exist_ok=True)
    settings = DemoSettings(store_url=store_url or f"sqlite:///{directory / 'demo.db'}", workdir=directory,
                            broker_url=broker_url, speed=speed, alertmanager=alertmanager)
    use_live = sys.stdout.isatty() if live is None else live
    try:
        status = Director(settings, make_view(use_live)).run()
    except ReliableError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    sys.exit(status)
