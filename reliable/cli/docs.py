"""`reliable docs [TOPIC]`: the documentation shipped in the package, by topic."""

from __future__ import annotations

import sys

import click

from ..defaults import topics
from .common import emit_json, handle_errors

__all__ = ["docs"]


@click.command()
@click.argument("topic", required=False)
@click.option("--path", "show_path", is_flag=True, help="Print where the page is on disk instead of the page.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the list of topics).")
@handle_errors
def docs(topic: str | None, show_path: bool, as_json: bool) -> None:
    """List the documentation's topics, or print one (Markdown).

    TOPIC is a page's name, e.g. `reliable docs worker`; a reference as messages write it
    ("docs/worker.md", "docs/rabbitmq.md#section") works too. On a terminal the page opens in a
    pager ($PAGER, else less or more); piped, it is printed as it is. The web console serves the
    same pages at /docs, as HTML with links between them.
    """
    if topic is None:
        found = topics.topics()
        if as_json:
            emit_json([{"topic": t.name, "title": t.title, "path": str(t.file)} for t in found])
            return
        width = max(len(t.name) for t in found)
        for t in found:
            click.echo(f"{t.name:<{width}}  {t.title}")
        click.echo("\nreliable docs TOPIC prints one.")
        return
    page = topics.find(topic)
    if show_path:
        click.echo(str(page.file))
    elif as_json:
        emit_json({"topic": page.name, "title": page.title, "path": str(page.file), "text": page.text()})
    elif sys.stdout.isatty():
        click.echo_via_pager(page.text())
    else:
        click.echo(page.text(), nl=False)
