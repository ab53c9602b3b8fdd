"""The console's queues page (issue 28): every queue's figures, and pausing / resuming a queue.

    GET  /queues                              a page of the queues (as GET /api/v1/queues: ?limit=,
                                              ?cursor=, ?search=; ?limits_after= pages the limits), a
                                              link per queue to its actions where the operators policy
                                              allows one (no form per row: issue 42, 100 rows' forms
                                              were most of the page's time and weight)
    GET  /queues/{queue}/actions              the queue's pause or resume form and the one to clear
                                              its PENDING jobs (posted to /bulk: a bulk cancel,
                                              counted first, confirmed on the operation's page);
                                              404 for a queue the Queues page does not list
    POST /queues/{queue}/actions/{command}    pause or resume (reason required); back to /queues

Every rule lives in `reliable.queue_pauses` (policy, audit, reason): a refusal is shown as it was
worded, a policy refusal is a 403 page (audited on the queue). While a queue is paused every page
shows a banner (`console.render`). The queue is one path segment (`paths.SegmentRoute`): a name
holding ``/`` is percent-encoded in the links (the `segment` filter, `url_for`) and still matched.
"""

from __future__ import annotations

from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from .. import queue_pauses
from ..access import Principal
from ..errors import NotAuthorized, ReliableError
from .auth import authenticate, state_of
from .console import flash, render
from .limits import limits_section
from .paths import SegmentRoute
from .queues import read_page

__all__ = ["routes"]

_COMMANDS = ("pause", "resume")


async def queues_page(request: Request) -> Response:
    """GET /queues: the queues' figures and pauses, with pause / resume forms where allowed."""
    principal = await authenticate(request)
    figures, pauses = await run_in_threadpool(read_page, request, ("limits_after",))
    limits = await run_in_threadpool(limits_section, request, principal)  # issue 42
    for row in figures["queues"]:
        _row_actions(row, principal)
    search = (request.query_params.get("search") or "").strip()  # read_page checked it
    params = {k: v for k, v in request.query_params.items() if k not in ("cursor", "limits_after")}
    next_url = None if figures["next_cursor"] is None else \
        str(request.url.remove_query_params("limits_after").include_query_params(**params,
                                                                                 cursor=figures["next_cursor"]))
    first_url = str(request.url.remove_query_params(["cursor", "limits_after"])) \
        if "cursor" in request.query_params else None
    return render(request, "queues.html", principal=principal, figures=figures, paused_queues=list(pauses.pauses),
                  limits=limits, search=search, next_url=next_url, first_url=first_url)


def _row_actions(row: dict[str, Any], principal: Principal) -> None:
    """The commands `principal` may give on the queue of `row` (the page's links, the queue's forms)."""
    command = "resume" if row["paused"] else "pause"
    row["command"] = command if principal.allows(command, row["queue"], None) else None
    # Clearing the queue is a bulk cancel of its PENDING jobs (PENDING -> CANCELLED in states.py):
    # the form counts them first (the bulk preview), then asks for the confirmation.
    row["clear_pending"] = bool(row["by_state"].get("PENDING")) and principal.allows("cancel", row["queue"], None)


async def queue_actions_page(request: Request) -> Response:
    """GET /queues/{queue}/actions: the queue's pause or resume form and its Clear pending form; a
    400 for a name no queue can have (`queue_pauses.check_queue_name`), a 404 for a queue the Queues
    page does not list (no job counted in the overview, no pause on record: `queue_pauses.queue_names`)."""
    principal = await authenticate(request)
    queue, state = queue_pauses.check_queue_name(request.path_params["queue"]), state_of(request)

    def read() -> dict[str, Any] | None:
        pauses = queue_pauses.paused(state.store)
        overview = state.overview()
        if queue not in queue_pauses.queue_names(overview, pauses):
            return None
        figures = queue_pauses.queue_figures(overview.with_queues(state.store, [queue]), pauses, [queue])
        return dict(figures["queues"][0])

    row = await run_in_threadpool(read)
    if row is None:
        raise HTTPException(404, f"no queue {queue!r}: no job counted in the last day and no pause on record")
    _row_actions(row, principal)
    return render(request, "queue_actions.html", principal=principal, q=row)


async def queue_action(request: Request) -> Response:
    """POST /queues/{queue}/actions/{command}: pause or resume the queue as the signed-in principal."""
    principal = await authenticate(request)  # checks the CSRF token of a session
    command, queue = request.path_params["command"], request.path_params["queue"]
    if command not in _COMMANDS:
        raise HTTPException(404, f"no queue command {command!r} (known: {', '.join(_COMMANDS)})")
    form = await request.form()
    reason = str(form.get("reason") or "").strip() or None
    state = state_of(request)
    act = queue_pauses.pause if command == "pause" else queue_pauses.resume
    try:
        changed = await run_in_threadpool(lambda: act(state.store, queue, reason=reason,
                                                      identity=principal.operator(state.config.host),
                                                      operators=principal.operators))
    except NotAuthorized:
        raise
    except ReliableError as exc:
        flash(request, "error", f"{command} of queue {queue} refused: {exc}")
    else:
        state.forget_queue_pauses()
        flash(request, "ok", f"queue {queue} {command}d." if changed
              else f"queue {queue} was already {'paused' if command == 'pause' else 'running'}: nothing changed.")
    return RedirectResponse(str(request.url_for("queues")), 303)


def routes() -> list[BaseRoute]:
    """The queues page's routes."""
    return [
        Route("/queues", queues_page, name="queues"),
        SegmentRoute("/queues/{queue}/actions", queue_actions_page, param="queue", name="queue_actions"),
        SegmentRoute("/queues/{queue}/actions/{command}", queue_action, param="queue", methods=["POST"],
                     name="queue_action"),
    ]
