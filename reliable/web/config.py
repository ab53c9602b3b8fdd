"""How the HTTP API and console are set up: `WebConfig`."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..operators import OperatorsPolicy

__all__ = ["ENV_SECRET", "WebConfig"]

#: Environment variable holding the key that signs browser sessions (set it when several replicas serve).
ENV_SECRET = "RELIABLE_WEB_SECRET"


@dataclass(frozen=True)
class WebConfig:
    """Settings of `reliable.web.create_app`.

    secret_key: signs session cookies (default: $RELIABLE_WEB_SECRET, else a random key per process:
      sessions then end when the process restarts, and replicas must share one).
    proxy_header: trust this request header (e.g. "X-Forwarded-User") as the signed-in user's name,
      from `trusted_proxies` only (required with it: any process there may name any user); that user's
      roles come from `proxy_operators` (an operators policy).
    redact: glob patterns of argument field names masked, beyond the secrets' names that always are
      (`reliable.redact.SECRET_NAMES`), for callers who may not act on the job.
    cookie_secure: send the session cookie over HTTPS only (set it behind TLS).
    session_max_age: seconds a browser session lasts (the token it was opened with is checked on
      every request, so a revocation ends it at once anyway).
    bulk_rate: jobs per second a bulk operation acts on; bulk_max: the most jobs one may count;
      confirm_ttl: seconds a counted bulk operation waits for its confirmation.
    overview_ttl: seconds the overview's figures are reused for (0: computed on every request).
    host: the host name recorded on audited events (default: this machine's).
    alertmanagers: Alertmanager base URLs the alerts pages read (GET /api/v2/alerts): every firing
      alert, Prometheus' too, is listed; none: only the store evaluator's, and the page says so.
    alertmanager_timeout: seconds a read of Alertmanager may take before the page says it is unreachable.
    """

    secret_key: str = field(default_factory=lambda: os.environ.get(ENV_SECRET) or secrets.token_urlsafe(32))
    proxy_header: str | None = None
    trusted_proxies: tuple[str, ...] = ()
    proxy_operators: OperatorsPolicy | None = None
    redact: tuple[str, ...] = ()
    cookie_secure: bool = False
    session_max_age: int = 8 * 3600
    bulk_rate: float = 20.0
    bulk_max: int = 10_000
    confirm_ttl: float = 300.0
    overview_ttl: float = 5.0
    host: str = field(default_factory=socket.gethostname)
    alertmanagers: tuple[str, ...] = ()
    alertmanager_timeout: float = 3.0

    def __post_init__(self) -> None:
        for url in self.alertmanagers:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"alertmanagers: expected an http(s) URL, got {url!r}")
        if self.proxy_header and not self.trusted_proxies:
            raise ConfigError("proxy_header needs trusted_proxies: the addresses the authenticating proxy connects "
                              "from (anyone else could name any user in that header)")
        if self.proxy_header and self.proxy_operators is None:
            raise ConfigError("proxy_header needs proxy_operators: the operators policy giving its users their roles")
