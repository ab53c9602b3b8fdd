"""The console's bulk actions, over the bulk operations engine (`reliable.operations`).

A list page (jobs, DLQ, REVIEW) offers a bulk form to those who may act: a command, a reason, and
either the jobs ticked in the table or every job the page's filter matches. Submitting it counts
the jobs (a preview: nothing changes) and shows the operation's page: how many jobs, in which
states, how many would be refused, a sample, when the preview expires, and a Confirm button, to
its creator (or an admin) in any browser they sign in to. The Confirm form carries the
operation's `counted_digest` (a hash of the counted ids), so it confirms exactly the set shown
(`Operations.confirm_counted`, which also re-checks the confirmer's rights). A preview every job
of which would be refused offers no confirmation; an expired one says so. Confirmed, the
operation runs at its rate in the server; its page shows the progress, a Cancel button while it
runs, and every job's outcome when it ends. Every rule (which jobs, who may, what each command
does) is the engine's and Control's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from ..errors import ConfigError, NotAuthorized, OperationNotFound, ReliableError, StoreError
from ..operations import ACTIVE_STATUSES, ALIASES
from ..store.selection import JobFilter, jobs_with_ids
from .auth import authenticate, state_of
from .console import VIEWS, flash, job_filter, list_form, render
from .operations import operations_of
from .redaction import masked_job

__all__ = ["routes"]



def _selection(form: Any, view_name: str) -> JobFilter:
    """The jobs a bulk form means: the ticked ones (within the page's view), or the page's filter."""
    view = VIEWS.get(view_name)
    if view is None:
        raise ConfigError(f"unknown list {view_name!r}")
    filters = list_form(form)
    flt = job_filter(filters, view)
    if form.get("scope") == "selected":
        ids = tuple(str(v) for v in form.getlist("job_id"))
        if not ids:
            raise ConfigError("no job is selected: tick the jobs to act on, or choose 'every job the filter "
                              "matches'")
        flt = dataclasses.replace(JobFilter(job_ids=ids), statuses=view.fixed,
                                  exclude_discarded=view.exclude_discarded)
    return flt


async def bulk_preview(request: Request) -> Response:
    """POST /bulk: count the jobs for a command (nothing changes yet); on to the operation's page."""
    principal = await authenticate(request)  # checks the session's CSRF token
    form = await request.form()
    state = state_of(request)
    view_name = str(form.get("view") or "jobs")
    back = str(request.url_for(view_name if view_name in VIEWS else "jobs"))
    command = str(form.get("command") or "")
    view = VIEWS.get(view_name)
    if view is not None and ALIASES.get(command, command) not in view.commands:
        flash(request, "error", f"bulk {command or 'action'} refused: {view.title.lower()} take "
                                f"{', '.join(view.commands)}, not {command!r}")
        return RedirectResponse(back, 303)
    options: dict[str, Any] = {}
    if command == "reconcile":
        options["resolution"] = str(form.get("resolution") or "")
    if command in ("restart", "requeue") and form.get("confirm_duplicates") == "yes":
        options["allow_duplicate_side_effects"] = True
    rate_text = str(form.get("rate") or "").strip()
    try:
        rate = float(rate_text) if rate_text else None
        flt = _selection(form, view_name)
        preview = await run_in_threadpool(functools.partial(
            operations_of(request).preview, state.control_for(principal), command, flt,
            reason=str(form.get("reason") or "").strip() or None, options=options, rate=rate))
    except (NotAuthorized, StoreError):  # a store error's text names the database: the app's handler
        raise
    except (ReliableError, ValueError) as exc:
        flash(request, "error", f"bulk {command or 'action'} refused: {exc}")
        return RedirectResponse(back, 303)
    return RedirectResponse(str(request.url_for("operation", operation_id=preview.operation.operation_id)), 303)


async def operation_page(request: Request) -> Response:
    """GET /operations/{operation_id}: the count and a sample awaiting confirmation, or the progress."""
    principal = await authenticate(request)
    state = state_of(request)
    engine = operations_of(request)
    try:
        op = await run_in_threadpool(engine.get, request.path_params["operation_id"])
    except OperationNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    op = await run_in_threadpool(engine.as_seen_by, op, principal.reader)
    sample = await run_in_threadpool(functools.partial(jobs_with_ids, state.store, op.job_ids[:20],
                                                       reader=principal.reader))
    can_confirm = (op.status == "awaiting_confirmation" and principal.may_act and op.operator == principal.name)
    sample = [masked_job(job, principal, state.config.redact) for job in sample]
    return render(request, "operation.html", principal=principal, op=op, sample=sample, can_confirm=can_confirm,
                  confirm_ttl=engine.confirm_ttl,
                  active=op.status in ACTIVE_STATUSES,
                  can_cancel=op.status in ACTIVE_STATUSES and principal.may_act
                  and (principal.name in (op.operator, op.confirmed_by) or principal.unrestricted))


async def operations_page(request: Request) -> Response:
    """GET /operations: the recent bulk operations."""
    principal = await authenticate(request)
    found = await run_in_threadpool(functools.partial(operations_of(request).recent, limit=100))
    return render(request, "operations.html", principal=principal, operations=found)


async def operation_confirm(request: Request) -> Response:
    """POST /operations/{operation_id}/confirm: start the run, as its creator, on the set the page
    showed (its `counted_digest`, a form field), from whichever browser."""
    principal = await authenticate(request)
    operation_id = request.path_params["operation_id"]
    form = await request.form()
    call = functools.partial(operations_of(request).confirm_counted, operation_id,
                             str(form.get("counted_digest") or ""), state_of(request).control_for(principal))
    await _act_and_tell(request, call, done="confirmed: the operation runs now", refused="not confirmed")
    return RedirectResponse(str(request.url_for("operation", operation_id=operation_id)), 303)


async def operation_cancel(request: Request) -> Response:
    """POST /operations/{operation_id}/cancel: stop the run before its next job (or drop the preview)."""
    principal = await authenticate(request)
    if not principal.may_act:
        raise HTTPException(403, f"{principal.name!r} may run no command (a read-only role)")
    operation_id = request.path_params["operation_id"]
    call = functools.partial(operations_of(request).cancel, operation_id, principal.name,
                             admin=principal.unrestricted)
    await _act_and_tell(request, call, done="cancelled: no further job is acted on; what was done stays done",
                        refused="not cancelled")
    return RedirectResponse(str(request.url_for("operation", operation_id=operation_id)), 303)


async def _act_and_tell(request: Request, call: Callable[[], Any], *, done: str, refused: str) -> None:
    """Run an engine call in the thread pool and flash what happened: a missing operation is a 404, a
    refusal of the role a 403 page (NotAuthorized), any other refusal a message."""
    try:
        await run_in_threadpool(call)
    except OperationNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except (NotAuthorized, StoreError):  # a store error's text names the database: the app's handler
        raise
    except ReliableError as exc:
        flash(request, "error", f"{refused}: {exc}")
    else:
        flash(request, "ok", done)


def routes() -> list[BaseRoute]:
    """The bulk actions' routes."""
    return [
        Route("/bulk", bulk_preview, methods=["POST"], name="bulk"),
        Route("/operations", operations_page, name="operations"),
        Route("/operations/{operation_id}", operation_page, name="operation"),
        Route("/operations/{operation_id}/confirm", operation_confirm, methods=["POST"], name="operation_confirm"),
        Route("/operations/{operation_id}/cancel", operation_cancel, methods=["POST"], name="operation_cancel"),
    ]
