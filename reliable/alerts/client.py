"""A thin client for Alertmanager's API v2 over an injected httpx client: `POST /api/v2/alerts` (send)
and `GET /api/v2/alerts` (read what it holds, from every engine: the console and the runbook pages)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ..redact import redact_url

__all__ = ["AlertmanagerClient", "AlertmanagerUnreachable", "DeliveryError", "matcher"]


class DeliveryError(Exception):
    """Alertmanager did not accept the alerts (unreachable, timeout, or a non-2xx answer)."""


class AlertmanagerUnreachable(DeliveryError):
    """No Alertmanager answered a read: what it holds is unknown (never read it as "nothing fires")."""


def matcher(name: str, value: str) -> str:
    """An Alertmanager equality matcher, `name="value"`, the value quoted as its API expects."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'{name}="{escaped}"'


class AlertmanagerClient:
    """Posts alert arrays to one or more Alertmanagers (each gets every alert: no load balancer).

    The httpx client is injected (and owned by the caller) so tests and the runner control
    timeouts, transports and connection reuse.
    """

    def __init__(self, urls: Sequence[str], http: httpx.Client) -> None:
        self.urls = tuple(u.rstrip("/") for u in urls)
        self.http = http

    def post(self, url: str, alerts: list[dict[str, Any]]) -> None:
        """Send `alerts` to the Alertmanager at `url`; raise DeliveryError with a one-line reason."""
        try:
            response = self.http.post(f"{url}/api/v2/alerts", json=alerts)
        except httpx.HTTPError as exc:
            raise DeliveryError(f"{url}: {type(exc).__name__}: {exc}".strip()) from None
        if response.status_code // 100 != 2:
            raise DeliveryError(f"{url}: HTTP {response.status_code}: {response.text[:200].strip()}")

    def send(self, alerts: list[dict[str, Any]]) -> dict[str, str]:
        """Send `alerts` to every Alertmanager; return {url: error} for the ones that failed."""
        errors: dict[str, str] = {}
        if not alerts:
            return errors
        for url in self.urls:
            try:
                self.post(url, alerts)
            except DeliveryError as exc:
                errors[url] = str(exc)
        return errors

    def alerts(self, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds now (active, silenced and inhibited), whose labels include
        `labels`: from the first Alertmanager that answers (each one gets every alert). Raises
        AlertmanagerUnreachable when none answers, naming each one's failure."""
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("filter", matcher(k, v)) for k, v in sorted((labels or {}).items())]
        errors: list[str] = []
        for url in self.urls:
            shown = redact_url(url)  # a password in the URL's user part never reaches a page or a log
            try:
                response = self.http.get(f"{url}/api/v2/alerts", params=params)
            except httpx.HTTPError as exc:
                errors.append(f"{shown}: {type(exc).__name__}")
                continue
            if response.status_code // 100 != 2:
                errors.append(f"{shown}: HTTP {response.status_code}")
                continue
            try:
                body = response.json()
            except ValueError:  # a 2xx that is not JSON: a login page of a proxy in front of it
                errors.append(f"{shown}: answered {response.headers.get('content-type') or 'something'}, not JSON")
                continue
            if isinstance(body, list):
                return [a for a in body if isinstance(a, dict) and isinstance(a.get("labels"), dict)]
            errors.append(f"{shown}: not a list of alerts")
        raise AlertmanagerUnreachable("; ".join(errors) or "no Alertmanager configured")
