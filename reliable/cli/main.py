"""The `reliable` command: operators' entry point."""

from __future__ import annotations

import click

from .. import __version__
from .alerts import alerts
from .control import cancel, pause, reconcile, restart, resume, retry, stop
from .db import db
from .dlq import dlq
from .exporter import exporter
from .jobs import jobs
from .policy import policy
from .review import review


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="reliable")
def cli() -> None:
    """Operate Dramatiq jobs tracked by reliable: state store, jobs, control, recovery.

    Every command takes --store (or RELIABLE_STORE); the default is sqlite:///reliable.db.
    """


cli.add_command(alerts)
cli.add_command(db)
cli.add_command(exporter)
cli.add_command(jobs)
cli.add_command(policy)
cli.add_command(pause)
cli.add_command(stop)
cli.add_command(cancel)
cli.add_command(resume)
cli.add_command(restart)
cli.add_command(retry)
cli.add_command(reconcile)
cli.add_command(dlq)
cli.add_command(review)


def main() -> None:
    """Console-script entry point."""
    cli()
