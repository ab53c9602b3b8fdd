"""`reliable alerts`: check rule files, evaluate once, run the alert loop, export Prometheus rules."""

from __future__ import annotations

import json
import signal
import sys
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import httpx

from .. import defaults
from ..alerts import AlertConfig, AlertEngine, AlertmanagerClient, export_yaml, load_config, load_rules
from ..alerts.engine import DeliveryReport, Evaluation
from ..alerts.promql import export_rule_groups
from ..alerts.rules import AlertRule
from ..alerts.runbooks import DEFAULT_RUNBOOK_BASE_URL, RunbookRenderer, check_runbook_base_url
from ..errors import ConfigError, PolicyError
from .common import POSITIVE_DURATION, emit_json, handle_errors, open_store, store_option

__all__ = ["alert_config", "alerts", "checked_rules", "runbook_renderer"]

rules_option = click.option("--rules", "rules_path", envvar="RELIABLE_ALERT_RULES", show_envvar=True,
                            type=click.Path(path_type=Path),
                            help="Rule file or directory of *.yaml [default: the rules shipped with reliable; "
                                 "`reliable init` copies them for editing].")
config_option = click.option("--config", "config_path", type=click.Path(path_type=Path), envvar="RELIABLE_ALERT_CONFIG",
                             show_envvar=True,
                             help="Alerting settings YAML (alertmanagers, runbook_base_url, links, timings).")
runbook_base_option = click.option(
    "--runbook-base-url", envvar="RELIABLE_RUNBOOK_BASE_URL", show_envvar=True,
    help="Base of the runbook_url annotations (+ the lower-cased alert name) [default: from --config, else "
         f"{DEFAULT_RUNBOOK_BASE_URL}, where `reliable exporter` serves the rendered runbooks].")
runbooks_option = click.option("--runbooks", "runbooks_dir", type=click.Path(path_type=Path),
                               help="Runbook template directory [default: from --config, else the runbooks shipped "
                                    "with reliable].")


def alert_config(path: Path | None, runbook_base_url: str | None = None) -> AlertConfig:
    """The settings file (or the defaults), with --runbook-base-url / RELIABLE_RUNBOOK_BASE_URL over it."""
    config = load_config(path) if path is not None else AlertConfig()
    if runbook_base_url is None:
        return config
    return replace(config, runbook_base_url=check_runbook_base_url(runbook_base_url))


def _runbooks(given: Path | None, config: AlertConfig | None = None) -> Path:
    """--runbooks, else the settings file's `runbooks`, else the shipped templates."""
    if given is not None:
        return given
    return Path(config.runbooks) if config is not None and config.runbooks else defaults.path("runbooks")


def runbook_renderer(config: AlertConfig, runbooks_dir: Path | None) -> RunbookRenderer:
    """The renderer of the runbooks from --runbooks, the settings or the shipped ones."""
    return RunbookRenderer(_runbooks(runbooks_dir, config), links=config.links,
                           base_url=config.runbook_base_url)


def _rules(given: Path | None) -> Path:
    return given if given is not None else defaults.path("alert_rules")


def checked_rules(rules_path: Path | None, renderer: RunbookRenderer) -> list[AlertRule]:
    """The rules at --rules (default: the shipped ones), each runbook and annotation compiled."""
    rules = load_rules(_rules(rules_path))
    for rule in rules:
        renderer.check(rule)
    return rules


@click.group()
def alerts() -> None:
    """Alert rules over the state store, Prometheus rule export, Alertmanager delivery."""


@alerts.command()
@click.argument("path", type=click.Path(path_type=Path), required=False)
@rules_option
@runbooks_option
@click.option("--store", "store_url", metavar="URL",
              help="Also check each rule's fixed owner against the owners its jobs carry in this store.")
@click.option("--json", "as_json", is_flag=True,
              help="Print JSON: {ok, rules, store, promql, problems: [{path, line, field, message}]}.")
@handle_errors
def check(path: Path | None, rules_path: Path | None, runbooks_dir: Path | None, store_url: str | None,
          as_json: bool) -> None:
    """Validate the rule files at PATH (a file or a directory): one line per problem, exit 2 on errors.

    PATH may also be given as --rules (like the other `alerts` commands); neither: the shipped rules.

    Runbook templates named by the rules are compiled too (from --runbooks, default the shipped ones).
    """
    given = click.get_current_context().get_parameter_source("rules_path") is click.core.ParameterSource.COMMANDLINE
    if path is not None and given and path != rules_path:
        raise click.UsageError(f"two rule paths: PATH {path} and --rules {rules_path}; give one")
    if path is not None:
        rules_path = None  # PATH wins over RELIABLE_ALERT_RULES
    problems: list[PolicyError] = []
    rules = load_rules(_rules(path or rules_path), collect=problems)
    renderer = RunbookRenderer(_runbooks(runbooks_dir))
    for rule in rules:
        try:
            renderer.check(rule)
        except PolicyError as exc:
            problems.append(exc)
    if store_url is not None:
        from ..alerts.owners import owner_problems
        from ..store.alert_queries import job_owners

        opened = open_store(store_url)
        try:
            problems += owner_problems(rules, lambda queue, actor: job_owners(opened, queue, actor))
        finally:
            opened.close()
    store = sum(r.kind == "store" for r in rules)
    if as_json:
        emit_json({"ok": not problems, "rules": len(rules), "store": store, "promql": len(rules) - store,
                   "problems": [{"path": p.path, "line": p.line, "field": p.field, "message": str(p)}
                                for p in problems]})
    else:
        for problem in problems:
            click.echo(f"error: {problem}", err=True)
        if not problems:
            click.echo(f"OK: {len(rules)} rules ({store} store, {len(rules) - store} promql)")
    if problems:
        sys.exit(2)


@alerts.command("test")
@store_option
@rules_option
@config_option
@runbooks_option
@runbook_base_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with each alert's rendered runbook).")
@handle_errors
def test_(store_url: str, rules_path: Path | None, config_path: Path | None, runbooks_dir: Path | None,
          runbook_base_url: str | None, as_json: bool) -> None:
    """Evaluate the store rules once and print what would fire; sends and writes nothing.

    The `for` of each rule is shown but not waited for: every condition that holds now is listed.
    """
    config = alert_config(config_path, runbook_base_url)
    renderer = runbook_renderer(config, runbooks_dir)
    rules = checked_rules(rules_path, renderer)
    engine = AlertEngine(open_store(store_url), rules, renderer, policy=config.policy)
    evaluation = engine.evaluate(persist=False)
    found: list[dict[str, Any]] = []
    for c in evaluation.candidates:
        found.append({"alertname": c.rule.name, "labels": dict(c.labels), "value": c.value,
                      "for": c.rule.for_seconds, "fingerprint": c.fingerprint, "annotations": engine.annotations(c),
                      "runbook": engine.runbook(c) if as_json else None})
    if as_json:
        emit_json({"evaluated_at": evaluation.now, "seconds": evaluation.seconds, "alerts": found})
        return
    for item in found:
        labels = ",".join(f"{k}={v}" for k, v in sorted(item["labels"].items()) if k != "alertname")
        click.echo(f"{item['alertname']}{{{labels}}} value={item['value']:.3g} for={item['for']:g}s: "
                   f"{item['annotations'].get('summary', '')}")
    click.echo(f"{len(found)} alert(s) would fire ({len(engine.rules)} store rules, "
               f"{evaluation.seconds * 1000:.0f} ms)")


@alerts.command()
@store_option
@rules_option
@config_option
@runbooks_option
@runbook_base_option
@click.option("--alertmanager", "alertmanagers", multiple=True, metavar="URL",
              help="Alertmanager base URL (repeatable; each gets every alert). Default: from --config.")
@click.option("--interval", type=POSITIVE_DURATION, default="30s", show_default=True,
              help="Evaluation interval (30s, 1m30s or seconds).")
@click.option("--once", is_flag=True, help="Run one cycle (evaluate + deliver) and exit.")
@click.option("--json", "as_json", is_flag=True,
              help="Print one JSON object per cycle, one per line: {evaluated_at, seconds, rules, firing: "
                   "[{alertname, labels}], sent, failed, errors}.")
@handle_errors
def run(store_url: str, rules_path: Path | None, config_path: Path | None, runbooks_dir: Path | None,
        runbook_base_url: str | None, alertmanagers: tuple[str, ...], interval: float, once: bool,
        as_json: bool) -> None:
    """Evaluate the store rules every --interval and deliver alerts to Alertmanager (API v2).

    Alert state lives in the store (reliable_alerts): if Alertmanager is down, alerts are retried
    with backoff and delivered once it is back. Stop with Ctrl-C or SIGTERM. With --once, the
    exit status is 1 when a delivery failed (the alerts stay in the store for the next run).
    """
    config = alert_config(config_path, runbook_base_url)
    urls = alertmanagers or config.alertmanagers
    if not urls:
        raise ConfigError("no Alertmanager: pass --alertmanager URL or set alertmanagers in --config")
    renderer = runbook_renderer(config, runbooks_dir)
    rules = checked_rules(rules_path, renderer)
    policy = config.policy if config_path else type(config.policy)(evaluation_interval=interval)
    with httpx.Client(timeout=config.timeout) as http:
        engine = AlertEngine(open_store(store_url), rules, renderer, client=AlertmanagerClient(urls, http),
                             policy=policy, generator_url=config.generator_url,
                             runbook_annotation=config.runbook_annotation)

        def report(evaluation: Evaluation, delivery: DeliveryReport) -> None:
            if as_json:
                emit_json({"evaluated_at": evaluation.now, "seconds": evaluation.seconds, "rules": len(engine.rules),
                           "firing": [{"alertname": a.alertname, "labels": dict(a.labels)} for a in evaluation.firing],
                           "sent": delivery.sent, "failed": delivery.failed, "errors": delivery.errors},
                          one_line=True)
                return
            click.echo(f"evaluated {len(engine.rules)} rules in {evaluation.seconds * 1000:.0f} ms: "
                       f"{len(evaluation.firing)} firing; sent {delivery.sent}, failed {delivery.failed}"
                       + (f" ({'; '.join(delivery.errors.values())})" if delivery.errors else ""))

        if once:
            evaluation, delivery = engine.run_once()
            report(evaluation, delivery)
            if delivery.failed:
                sys.exit(1)
            return
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            engine.run(interval, stop, report)
        except KeyboardInterrupt:
            stop.set()


@alerts.command("export-prometheus")
@rules_option
@config_option
@click.option("--out", "out", type=click.Path(path_type=Path), help="Write here instead of stdout.")
@runbook_base_option
@click.option("--json", "as_json", is_flag=True,
              help="Write the rule file as JSON ({groups: [...]}; promtool reads it as YAML too).")
@handle_errors
def export_prometheus(rules_path: Path | None, config_path: Path | None, out: Path | None,
                      runbook_base_url: str | None, as_json: bool) -> None:
    """Write the PromQL rules as a Prometheus rule file (check it with `promtool check rules`)."""
    config = alert_config(config_path, runbook_base_url)
    base_url = config.runbook_base_url
    rules = load_rules(_rules(rules_path))
    text = json.dumps(export_rule_groups(rules, base_url), indent=2) + "\n" if as_json else export_yaml(rules, base_url)
    if out is None:
        click.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")
        click.echo(f"wrote {out}", err=True)
