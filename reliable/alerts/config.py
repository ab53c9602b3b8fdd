"""Alerting settings (YAML): Alertmanager URLs, runbook base URL, log/trace link templates, timings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..durations import parse_duration
from ..errors import ConfigError, PolicyError
from ..yamlfile import LocatedMap, LocatedSeq, load
from .lifecycle import DeliveryPolicy
from .runbooks import DEFAULT_RUNBOOK_BASE_URL, check_link_template, check_runbook_base_url

__all__ = ["AlertConfig", "console_runbooks", "load_config"]

_TIMINGS = ("evaluation_interval", "resend_interval", "resolved_resend_for", "backoff_initial", "backoff_max")
_KEYS = {"alertmanagers", "runbook_base_url", "runbook_annotation", "runbooks", "links", "generator_url", "timeout",
         "console_url", *_TIMINGS}


@dataclass(frozen=True)
class AlertConfig:
    """Where alerts go and how they look; every field has a working default."""

    alertmanagers: tuple[str, ...] = ()
    #: runbook_url = this + the lower-cased alert name; default: the runbooks `reliable exporter` serves.
    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL
    #: Also send the rendered runbook as an annotation (off: it is read at runbook_url).
    runbook_annotation: bool = False
    #: Runbook template directory; empty: the runbooks shipped with reliable.
    runbooks: str = ""
    links: Mapping[str, str] = field(default_factory=dict)
    generator_url: str | None = None
    #: The console's address: runbook links open its HTML runbooks (`<console_url>/alerts/<name>`)
    #: unless `runbook_base_url` is set, and the exporter's runbook pages link job ids to its job pages.
    console_url: str | None = None
    timeout: float = 5.0
    policy: DeliveryPolicy = field(default_factory=DeliveryPolicy)


def load_config(path: Path | str) -> AlertConfig:
    """Read an alerting settings file; PolicyError names file, line and field."""
    path = Path(path)
    doc = load(path, "alerting settings")
    if doc is None:
        return AlertConfig()
    if not isinstance(doc, LocatedMap):
        raise PolicyError("the alerting settings must be a mapping", path=str(path), line=1)
    for key in sorted(set(doc) - _KEYS):
        raise doc.at(key).error(f"unknown key {key!r} (allowed: {', '.join(sorted(_KEYS))})", key)
    values: dict[str, Any] = {}
    timings: dict[str, float] = {}
    for key, raw in doc.items():
        at = doc.at(key)
        if key in _TIMINGS or key == "timeout":
            try:
                seconds = parse_duration(raw)
            except ValueError as exc:
                raise at.error(str(exc), key) from None
            if seconds <= 0:
                raise at.error(f"{key} must be longer than 0s", key)
            if key == "timeout":
                values["timeout"] = seconds
            else:
                timings[key] = seconds
        elif key == "alertmanagers":
            if not isinstance(raw, LocatedSeq) or not all(isinstance(u, str) and u.startswith("http") for u in raw):
                raise at.error("alertmanagers must be a list of http(s) URLs", key)
            values[key] = tuple(u.rstrip("/") for u in raw)
        elif key == "links":
            if not isinstance(raw, LocatedMap):
                raise at.error("links must map a name (logs, traces...) to a URL template", key)
            for name, template in raw.items():
                try:
                    check_link_template(name, str(template))
                except ConfigError as exc:
                    raise raw.at(name).error(str(exc), f"links.{name}") from None
            values[key] = {str(k): str(v) for k, v in raw.items()}
        elif key == "runbook_annotation":
            if not isinstance(raw, bool):
                raise at.error("runbook_annotation must be true or false", key)
            values[key] = raw
        else:
            if not isinstance(raw, str):
                raise at.error(f"{key} must be a string", key)
            if key == "runbook_base_url":
                try:
                    check_runbook_base_url(raw)
                except ConfigError as exc:
                    raise at.error(str(exc), key) from None
            if key == "console_url":
                raw = raw.rstrip("/")
                try:
                    check_runbook_base_url(f"{raw}/alerts/")
                except ConfigError:
                    raise at.error(f"console_url must be an absolute http(s) URL, got {raw!r}", key) from None
            values[key] = raw
    if "console_url" in values and "runbook_base_url" not in values:
        values["runbook_base_url"] = console_runbooks(values["console_url"])
    return AlertConfig(policy=DeliveryPolicy(**timings), **values)


def console_runbooks(console_url: str) -> str:
    """Where the console serves its HTML runbooks: the runbook base URL when a console is configured."""
    return f"{console_url.rstrip('/')}/alerts/"
