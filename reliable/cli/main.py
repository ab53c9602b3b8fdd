"""The `reliable` command: operators' entry point."""

from __future__ import annotations

import click

from .. import __version__
from .db import db
from .jobs import jobs


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="reliable")
def cli() -> None:
    """Operate Dramatiq jobs tracked by reliable: state store, jobs, control, recovery.

    Every command takes --store (or RELIABLE_STORE); the default is sqlite:///reliable.db.
    """


cli.add_command(db)
cli.add_command(jobs)


def main() -> None:
    """Console-script entry point."""
    cli()
