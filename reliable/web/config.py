"""How the HTTP API and console are set up: `WebConfig`."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field

from ..operators import OperatorsPolicy

__all__ = ["DEFAULT_REDACT", "ENV_SECRET", "WebConfig"]

#: Environment variable holding the key that signs browser sessions (set it when several replicas serve).
ENV_SECRET = "RELIABLE_WEB_SECRET"

#: Argument fields masked for read-only callers unless configured otherwise (globs, case-insensitive).
DEFAULT_REDACT: tuple[str, ...] = ("*password*", "*passwd*", "*secret*", "*token*", "*api_key*", "*apikey*",
                                   "authorization", "*credential*", "card_number", "*ssn*", "cvv")


@dataclass(frozen=True)
class WebConfig:
    """Settings of `reliable.web.create_app`.

    secret_key: signs session cookies (default: $RELIABLE_WEB_SECRET, else a random key per process:
      sessions then end when the process restarts, and replicas must share one).
    proxy_header: trust this request header (e.g. "X-Forwarded-User") as the signed-in user's name,
      from `trusted_proxies` only; that user's roles come from `proxy_operators` (an operators policy).
    redact: glob patterns of argument field names masked for read-only callers.
    cookie_secure: send the session cookie over HTTPS only (set it behind TLS).
    session_max_age: seconds a browser session lasts (the token it was opened with is checked on
      every request, so a revocation ends it at once anyway).
    bulk_rate: jobs per second a bulk operation acts on; bulk_max: the most jobs one may count;
      confirm_ttl: seconds a counted bulk operation waits for its confirmation.
    overview_ttl: seconds the overview's figures are reused for (0: computed on every request).
    host: the host name recorded on audited events (default: this machine's).
    """

    secret_key: str = field(default_factory=lambda: os.environ.get(ENV_SECRET) or secrets.token_urlsafe(32))
    proxy_header: str | None = None
    trusted_proxies: tuple[str, ...] = ("127.0.0.1", "::1")
    proxy_operators: OperatorsPolicy | None = None
    redact: tuple[str, ...] = DEFAULT_REDACT
    cookie_secure: bool = False
    session_max_age: int = 8 * 3600
    bulk_rate: float = 20.0
    bulk_max: int = 10_000
    confirm_ttl: float = 300.0
    overview_ttl: float = 5.0
    host: str = field(default_factory=socket.gethostname)
