"""`reliable init`: copy the shipped operational files into a project for editing."""

from __future__ import annotations

from pathlib import Path

import click

from .. import defaults
from .common import emit_json, handle_errors

__all__ = ["init"]

_NEXT_STEPS = """\
Your policy goes in {policies}/app.yaml (or any *.yaml there): those files are loaded in name order
on top of the built-in policy, their rules tried first. {policies}/builtin/ and {policies}/examples/
are for reading: sub-folders are never loaded (reliable docs policies).
Next:
  reliable.install(broker, store=..., policies="{policies}")   # in your app, beside the broker
  reliable policy check {policies}
  reliable alerts check {alert_rules} --runbooks {runbooks}
  reliable alerts export-prometheus --rules {alert_rules} --out reliable-rules.yaml   # for Prometheus
Metrics: `reliable worker APP` and `reliable exporter` on the same host share a directory by default:
  one scrape target per host has every series the rules use (reliable docs observability).
Grafana: import {grafana}/reliable-dashboard.json; Alertmanager: see {alertmanager}/alertmanager.yml.
Docs: reliable docs (the topics), reliable docs TOPIC (one page)."""


@click.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--only", "names", multiple=True, type=click.Choice(defaults.SHIPPED),
              help="Copy only this folder (repeatable). Default: all of them.")
@click.option("--force", is_flag=True, help="Overwrite files that exist (default: keep them and say so).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@handle_errors
def init(directory: Path, names: tuple[str, ...], force: bool, as_json: bool) -> None:
    """Copy the shipped policies, alert rules, runbooks and dashboards into a project for editing.

    DIRECTORY (default: the current one) receives policies/, alert_rules/, runbooks/, grafana/ and
    alertmanager/: the same files reliable uses when no path is given. Existing files are kept.
    policies/app.yaml is your (empty) policy; policies/builtin/default.yaml, the built-in policy
    written out, is for reading and is not loaded (sub-folders never are).
    """
    copied = defaults.copy_into(directory, names=names or defaults.SHIPPED, overwrite=force)
    if as_json:
        emit_json({"written": [str(p) for p in copied.written], "kept": [str(p) for p in copied.kept]})
        return
    for path in copied.written:
        click.echo(f"wrote {path}")
    for path in copied.kept:
        click.echo(f"kept  {path} (exists; --force overwrites)")
    click.echo(f"{len(copied.written)} written, {len(copied.kept)} kept.")
    click.echo(_NEXT_STEPS.format(**{name: directory / name for name in defaults.SHIPPED}))
