"""`reliable exporter`: serve /metrics and /healthz for Prometheus, and the alerts' runbooks."""

from __future__ import annotations

from pathlib import Path

import click

from ..alerts.pages import RunbookPages
from ..durations import parse_duration
from ..exporter import DEFAULT_HOST, serve
from ..multiprocess import prepare, store_dirs, user_dir
from ..store.db import database_location
from .alerts import (
    alert_config,
    checked_rules,
    config_option,
    rules_option,
    runbook_base_option,
    runbook_renderer,
    runbooks_option,
)
from .common import STATE_CHOICE, handle_errors, open_store, store_option


def _parse_sla(values: tuple[str, ...]) -> dict[str, float]:
    sla: dict[str, float] = {}
    for item in values:
        state, sep, duration = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r}: expected STATE=DURATION, e.g. RUNNING=1h", param_hint="--sla")
        try:
            sla[state.strip().upper()] = parse_duration(duration)
        except ValueError as exc:
            raise click.BadParameter(f"{item!r}: {exc}", param_hint="--sla") from None
    return sla


@click.command()
@click.option("--port", default=9464, show_default=True, type=click.IntRange(0, 65535), help="TCP port to listen on.")
@click.option("--host", default=DEFAULT_HOST, show_default=True, envvar="RELIABLE_EXPORTER_HOST", show_envvar=True,
              help="Address to listen on: this host only by default; 0.0.0.0 (every interface) when Prometheus "
                   "scrapes it from another host.")
@store_option
@click.option("--broker", "broker_url", envvar="RELIABLE_BROKER", show_envvar=True,
              help="RabbitMQ URL (amqp://...; several ';'-separated for a cluster, tried in turn) to report "
                   "queue depths from; omitted: no broker gauges.")
@click.option("--sla", "sla_items", multiple=True, metavar="STATE=DURATION",
              help="Stuck threshold for RUNNING, STOPPING or PAUSED, e.g. RUNNING=2h (repeatable). "
                   "Defaults: 1h, 5m, 1d.")
@click.option("--state", "states", multiple=True, type=STATE_CHOICE,
              help="Count only these states in reliable_jobs (repeatable, any case). Default: all but SUCCEEDED, "
                   "FAILED, CANCELLED (final states grow without bound; their rates come from counters).")
@click.option("--queue", "queues", multiple=True, metavar="NAME",
              help="A queue to report (0 when empty) even before the store has an unfinished job in it "
                   "(repeatable). The queues the store knows of are reported anyway.")
@click.option("--multiprocess-dir", envvar="PROMETHEUS_MULTIPROC_DIR", show_envvar=True,
              type=click.Path(file_okay=False),
              help="The workers' prometheus_client multiprocess directory. Default: the directories "
                   "`reliable worker` made under /tmp/reliable-metrics-<uid> for the apps whose workers use "
                   "this --store (found at each scrape).")
@rules_option
@config_option
@runbooks_option
@runbook_base_option
@handle_errors
def exporter(port: int, host: str, store_url: str, broker_url: str | None, sla_items: tuple[str, ...],
             states: tuple[str, ...], queues: tuple[str, ...], multiprocess_dir: str | None, rules_path: Path | None,
             config_path: Path | None, runbooks_dir: Path | None, runbook_base_url: str | None) -> None:
    """Serve /metrics (store gauges + workers' metrics), /healthz and the alerts' runbooks.

    /runbooks/<lower-case alert name> renders an alert's runbook with the jobs it is about now: the
    default runbook_url of the alerts points here. The rules and runbooks are those `reliable alerts`
    uses (the shipped ones unless --rules, --runbooks or --config name yours).
    """
    sla = _parse_sla(sla_items)
    named = str(prepare(multiprocess_dir)) if multiprocess_dir else None
    if named is None:
        prepare(user_dir())  # ours and private, or refused now
    config = alert_config(config_path, runbook_base_url)
    renderer = runbook_renderer(config, runbooks_dir)
    rules = checked_rules(rules_path, renderer)
    alertmanager = None
    if config.alertmanagers:  # the runbook pages of PromQL alerts ask it which alert fires
        import httpx

        from ..alerts.client import AlertmanagerClient

        alertmanager = AlertmanagerClient(config.alertmanagers, httpx.Client(timeout=config.timeout))
    store = open_store(store_url)
    location = database_location(store.engine.url)
    directories = named if named is not None else (lambda: store_dirs(location))
    where = named or f"the directories of this store's apps under {user_dir()}"

    def ready(bound_host: str, bound_port: int) -> None:
        click.echo(f"reliable exporter listening on http://{bound_host}:{bound_port}/metrics "
                   f"(store {store.url}, workers' metrics from {where}); runbooks at /runbooks/", err=True)

    try:
        serve(store, host=host, port=port, broker_url=broker_url, sla=sla, states=states or None,
              multiprocess_dir=directories, ready=ready,
              runbooks=RunbookPages(store, rules, renderer, alertmanager=alertmanager),
              queues=queues, console_url=config.console_url)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    except KeyboardInterrupt:
        pass
    finally:
        store.close()
