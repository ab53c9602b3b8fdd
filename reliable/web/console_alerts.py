"""The console's alerts: `/alerts` (firing, pending and recently resolved alerts, from the evaluator's
table) and `/alerts/{alertname}` (the alert's runbook rendered as HTML with the jobs it is about now).

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
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from ..store.alert_rows import alert_rows
from .auth import authenticate, state_of

if TYPE_CHECKING:
    from ..alerts.pages import RunbookPages

__all__ = ["ORDER", "routes", "runbook_link", "use_runbooks"]

#: The order alerts are listed in: firing first.
ORDER = ("firing", "pending", "resolved")


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
        pages = RunbookPages(state_of(request).store, load_rules(path("alert_rules")), renderer)
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
    rows = await run_in_threadpool(alert_rows, state_of(request).store)
    rows.sort(key=lambda r: (ORDER.index(r["state"]) if r["state"] in ORDER else len(ORDER),
                             -(r.get("starts_at") or r.get("pending_since") or 0.0)))
    shown: list[dict[str, Any]] = [{**row, "runbook": runbook_link(request, row["alertname"], row["labels"])}
                                   for row in rows]
    return render(request, "alerts.html", principal=principal, alerts=shown, states=ORDER)


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
    text = await run_in_threadpool(functools.partial(pages.render, name, labels, base_url=base))
    if text is None:
        return error_page(request, 404, f"no runbook for alert {name!r}")
    return render(request, "alert_runbook.html", principal=principal, name=name, labels=labels,
                  body=runbook_html(text))


def routes() -> list[BaseRoute]:
    """The console's alert pages."""
    return [
        Route("/alerts", alerts_page, methods=["GET"], name="alerts"),
        Route("/alerts/{alertname}", alert_runbook, methods=["GET"], name="alert_runbook"),
    ]
