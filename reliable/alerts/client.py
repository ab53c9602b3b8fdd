"""A thin client for Alertmanager's API v2 (`POST /api/v2/alerts`) over an injected httpx client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

__all__ = ["AlertmanagerClient", "DeliveryError"]


class DeliveryError(Exception):
    """Alertmanager did not accept the alerts (unreachable, timeout, or a non-2xx answer)."""


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
