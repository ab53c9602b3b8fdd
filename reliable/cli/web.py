"""`reliable web`: serve the HTTP API and the console."""

from __future__ import annotations

import click

from ..errors import ConfigError
from ..operators import OperatorsPolicy
from .common import BROKER_QUEUES_HELP, handle_errors, open_store, rabbitmq_broker, store_option
from .control import ENV_OPERATORS_FILE, load_policy

__all__ = ["web"]


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="TCP port.")
@store_option
@click.option("--policies", "policies_path", envvar="RELIABLE_POLICIES", show_envvar=True,
              type=click.Path(exists=True), help="Policy file or directory: each job's contract (resumable, "
                                                 "idempotent...), so the console offers the right actions.")
@click.option("--broker", "broker_url", envvar="RELIABLE_BROKER", show_envvar=True,
              help="RabbitMQ URL: publish resumed/retried jobs at once (else the workers' sweeper does)."
                   + BROKER_QUEUES_HELP)
@click.option("--proxy-header", envvar="RELIABLE_WEB_PROXY_HEADER", show_envvar=True, metavar="HEADER",
              help="Trust this header (e.g. X-Forwarded-User) as the user's name, set by an authenticating proxy "
                   "on --trusted-proxy; roles then come from --operators-file.")
@click.option("--trusted-proxy", "trusted_proxies", multiple=True,
              help="Address the proxy connects from (repeatable; required with --proxy-header: any process "
                   "there may name any user).")
@click.option("--operators-file", type=click.Path(dir_okay=False, exists=True), envvar=ENV_OPERATORS_FILE,
              show_envvar=True, help="Operators policy giving proxy-authenticated users their roles.")
@click.option("--cookie-secure/--no-cookie-secure", default=False, show_default=True,
              help="Send the session cookie over HTTPS only (set it behind TLS).")
@click.option("--redact", "redact", multiple=True, metavar="GLOB",
              help="Also mask argument fields matching this name pattern for read-only users (repeatable; "
                   "password, token, secret, api_key... are masked already).")
@click.option("--alertmanager", "alertmanagers", multiple=True, envvar="RELIABLE_ALERTMANAGER", show_envvar=True,
              metavar="URL", help="Alertmanager the alerts pages read (repeatable): every firing alert is listed, "
                                  "Prometheus' too (without one: only the store evaluator's, and the page says so).")
@handle_errors
def web(host: str, port: int, store_url: str | None, policies_path: str | None, broker_url: str | None,
        proxy_header: str | None, trusted_proxies: tuple[str, ...], operators_file: str | None,
        cookie_secure: bool, redact: tuple[str, ...], alertmanagers: tuple[str, ...]) -> None:
    """Serve the HTTP API and the web console.

    The JSON API is under /api/v1 (described at /api/v1/openapi.json), the console at /.
    Sign in with an API token (`reliable tokens create NAME --role ...`). Sessions are signed with
    $RELIABLE_WEB_SECRET (set it when several replicas serve, or sessions end at each restart).
    """
    try:
        import uvicorn

        from ..web import WebConfig, create_app
    except ImportError as exc:
        raise ConfigError(f"reliable web needs the web extra: pip install 'reliable[web]' ({exc})") from None
    if proxy_header and not operators_file:
        raise ConfigError("--proxy-header needs --operators-file: it gives proxy-authenticated users their roles")
    if proxy_header and not trusted_proxies:
        raise ConfigError("--proxy-header needs --trusted-proxy ADDRESS: where the authenticating proxy connects "
                          "from (anyone else could name any user in that header)")
    broker = None
    if broker_url:
        broker = rabbitmq_broker(url=broker_url)
    config = WebConfig(proxy_header=proxy_header, trusted_proxies=trusted_proxies,
                       proxy_operators=OperatorsPolicy.load(operators_file) if operators_file else None,
                       cookie_secure=cookie_secure, redact=redact,
                       alertmanagers=tuple(u.rstrip("/") for u in alertmanagers))
    app = create_app(open_store(store_url), policy=load_policy(policies_path), broker=broker, config=config)
    uvicorn.run(app, host=host, port=port, log_level="info", proxy_headers=False)
