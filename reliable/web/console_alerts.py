"""The console's alerts: `/alerts` (every alert: the store evaluator's firing, pending and recently
resolved ones, and what Alertmanager holds, Prometheus' alerts among them, each with its source) and
`/alerts/{alertname}` (the alert's runbook rendered as HTML with the jobs it is about now, each job
a link to its page and its safe command a button for those who may act, the CLI line beside it).

Alertmanager is read at `WebConfig.alertmanagers` (GET /api/v2/alerts). None configured, or none
answering: the page says so in a banner; an empty list never stands for "all quiet" unless
Alertmanager was read.

A runbook link carries the alert's labels (`reliable.alerts.runbooks.RUNBOOK_LABELS`), so each of
three dead-letter alerts of three actors opens its own actor's jobs. The runbooks are rendered with
the rules and templates shipped with reliable unless the app was given its own
(`use_runbooks(app, RunbookPages(...))`); their links and footer name the console's own address.
The affected jobs' error messages and checkpoints are shown as an anonymous reader sees them
(secrets masked, `reliable.disclosure`), as on the exporter's pages and in notifications.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..alerts.listing import ORDER
from ..redact import redact_url
from ..store.alert_rows import alert_rows
from .auth import authenticate, state_of
from .inputs import query_cursor, query_int

if TYPE_CHECKING:
    from ..alerts.client import AlertmanagerClient
    from ..alerts.pages import RunbookPages

__all__ = ["MAX_PAGE", "ORDER", "PAGE", "all_alerts", "page_params", "routes", "runbook_link", "use_runbooks"]

#: Alerts per page (GET /api/v1/alerts and the console's page), by default and at most.
PAGE = 100
MAX_PAGE = 1000


def page_params(request: Request) -> tuple[int, str | None]:
    """?limit= and ?cursor= of the alerts listing (API and console)."""
    return query_int(request, "limit", PAGE, MAX_PAGE), query_cursor(request)



def _alertmanager(request: Request) -> AlertmanagerClient | None:
    """A client of the configured Alertmanagers (None when none is configured)."""
    urls = state_of(request).config.alertmanagers
    if not urls:
        return None
    import httpx

    from ..alerts.client import AlertmanagerClient

    return AlertmanagerClient(urls, httpx.Client(timeout=state_of(request).config.alertmanager_timeout))


def all_alerts(request: Request, state: str | None = None, *, limit: int = PAGE,
               cursor: str | None = None) -> dict[str, Any]:
    """A page of the alerts (`reliable.alerts.listing.merge_alerts`, `page_alerts`), of `state` when
    given, firing first, and what became of reading Alertmanager: {alerts, next_cursor, total,
    alertmanager: {urls, read, error}}. Blocking."""
    from ..alerts.client import DeliveryError
    from ..alerts.listing import merge_alerts, page_alerts

    rows = alert_rows(state_of(request).store)
    client = _alertmanager(request)
    held: list[dict[str, Any]] | None = None
    error: str | None = None if client is not None else "no Alertmanager configured: only the store's alerts"
    if client is not None:
        try:
            with client.http:
                held = client.alerts()
        except DeliveryError as exc:
            error = f"Alertmanager unreachable ({exc}): only the store's alerts are listed"
    alerts = [a for a in merge_alerts(rows, held) if state is None or a["state"] == state]
    page, after = page_alerts(alerts, limit=limit, cursor=cursor)
    urls = [redact_url(u) for u in state_of(request).config.alertmanagers]
    return {"alerts": page, "next_cursor": after, "total": len(alerts),
            "alertmanager": {"urls": urls, "read": held is not None, "error": error}}


def use_runbooks(app: Starlette, pages: RunbookPages) -> None:
    """Render the console's runbooks with `pages` (its rules and templates) instead of the shipped ones."""
    app.state.reliable_runbooks = pages


def _pages(request: Request) -> RunbookPages:
    """The app's runbook pages, made from the shipped rules and runbooks on first use."""
    app_state = request.app.state
    pages: RunbookPages | None = getattr(app_state, "reliable_runbooks", None)
    if pages is None:
        from ..alerts import load_rules
        from ..alerts.pages import RunbookPages
        from ..alerts.runbooks import RunbookRenderer
        from ..defaults import path

        renderer = RunbookRenderer(path("runbooks"))
        pages = RunbookPages(state_of(request).store, load_rules(path("alert_rules")), renderer,
                             alertmanager=_alertmanager(request))
        app_state.reliable_runbooks = pages
    return pages


def runbook_link(request: Request, alertname: str, labels: dict[str, str]) -> str:
    """The console's runbook page of an alert, with its labels (RUNBOOK_LABELS) as the query string."""
    from ..alerts.runbooks import RUNBOOK_LABELS

    query = urlencode([(key, labels[key]) for key in RUNBOOK_LABELS if labels.get(key)])
    url = str(request.url_for("alert_runbook", alertname=alertname.lower()))
    return f"{url}?{query}" if query else url


async def alerts_page(request: Request) -> Response:
    """GET /alerts: the alerts the evaluator keeps, firing first, each with its runbook's link."""
    from .console import render

    principal = await authenticate(request)
    for name in request.query_params:
        if name not in ("limit", "cursor"):
            raise HTTPException(400, f"unknown parameter {name!r} (known: limit, cursor)")
    limit, cursor = page_params(request)
    found = await run_in_threadpool(functools.partial(all_alerts, request, limit=limit, cursor=cursor))
    names = set(_pages(request).names())
    shown: list[dict[str, Any]] = [
        {**row, "runbook": runbook_link(request, row["alertname"], row["labels"]) if row["alertname"] in names
         else _web_link(row["annotations"].get("runbook_url"))} for row in found["alerts"]]
    params = {k: v for k, v in request.query_params.items() if k != "cursor"}
    next_url = None if found["next_cursor"] is None else \
        str(request.url.include_query_params(**params, cursor=found["next_cursor"]))
    first_url = str(request.url.remove_query_params("cursor")) if cursor else None
    return render(request, "alerts.html", principal=principal, alerts=shown, states=ORDER,
                  alertmanager=found["alertmanager"], total=found["total"], next_url=next_url, first_url=first_url)


async def alert_runbook(request: Request) -> Response:
    """GET /alerts/{alertname}: the runbook of the alert (its firing alert matching the query's labels,
    with its jobs), as HTML."""
    from ..alerts.runbook_html import runbook_html
    from .console import error_page, render

    principal = await authenticate(request)
    name = request.path_params["alertname"]
    pages = _pages(request)
    labels = {key: value for key, value in request.query_params.items()}
    base = str(request.url_for("alerts")).rstrip("/") + "/"
    page = await run_in_threadpool(functools.partial(pages.page, name, labels, base_url=base))
    if page is None:
        return error_page(request, 404, f"no runbook for alert {name!r}")
    body = runbook_html(page.text, job_url=lambda job_id: str(request.url_for("job", job_id=job_id)))
    return render(request, "alert_runbook.html", principal=principal, name=name, labels=labels, body=body,
                  jobs=page.jobs, reason=f"alert:{name}")


def routes() -> list[BaseRoute]:
    """The console's alert pages."""
    return [
        Route("/alerts", alerts_page, methods=["GET"], name="alerts"),
        Route("/alerts/{alertname}", alert_runbook, methods=["GET"], name="alert_runbook"),
    ]


def _web_link(url: object) -> str | None:
    """An annotation's runbook_url as a link: http(s) only (an alert from anyone who reaches
    Alertmanager names it), else none."""
    return url if isinstance(url, str) and url.lower().startswith(("https://", "http://")) else None
