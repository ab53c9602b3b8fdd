"""The console's pages: server-rendered HTML (Jinja2) over the same read model and `Control` as the API.

Pages: the overview (`/`, refreshed by polling a fragment), the job list (`/jobs`) and its two
fixed-state views (`/dlq`, `/review`), a job's detail (`/jobs/{id}`, a unique id prefix accepted)
and its actions (`POST /jobs/{id}/actions/{command}`), sign in and out. Every link, form and
redirect is built with `url_for`, so the console works mounted under any path prefix.

What a command may do is decided by `Control` alone: buttons follow its dry runs
(`Control.available`), and a refusal (audited by `Control`) is shown as it was worded.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData, QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from ..access import Principal
from ..commands import command_states
from ..errors import ConfigError, JobNotFound, NotAuthorized, ReliableError, StoreError
from ..inputs import shorten
from ..isotime import format_time
from ..operators import COMMAND_ORDER
from ..queue_pauses import queue_names
from ..state_tones import tone
from ..states import FAILURE_STATES, JobStatus
from ..store.job_history import event_names
from ..store.job_stats import History
from ..store.overview import OVERVIEW_QUEUES, Overview, known_names
from ..store.selection import JobFilter, filter_from_params, page_jobs, resolve_job_id
from .auth import CSRF_FIELD, authenticate, check_csrf, csrf_token, sign_in, sign_out, state_of
from .inputs import DEFAULT_LIMIT, MAX_LIMIT, query_before, query_cursor, query_int, query_window
from .job_story import FOLD_FROM, detail_fields, group_effects, runs
from .paths import JobIdConvertor, JobRoute
from .queries import job_detail, job_message
from .redaction import masked_job

__all__ = ["COMMANDS", "ERROR_STATES", "HISTORY_PAGE", "VIEWS", "Bar", "Chart", "ListView", "chart", "error_page",
           "flash", "job_filter", "list_form",
           "render", "routes", "sign_in_redirect", "signature", "state_badge"]

_HERE = Path(__file__).parent

#: The commands a job page offers, in the order shown (Control's method names).
COMMANDS: tuple[str, ...] = COMMAND_ORDER
_PAGE_SIZES = (25, 50, 100, 200)
_TEXT_FILTERS = ("queue", "actor", "owner", "error_class", "workflow", "search", "changed_since", "changed_until")


def _iso(epoch: float | None) -> str:
    """An epoch time as ISO 8601 UTC with Z, or an empty string."""
    return format_time(epoch) or ""


def _age(seconds: float | None) -> str:
    """A duration for people: 45s, 3m 12s, 2h 05m, 3d 4h."""
    if seconds is None:
        return ""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


def _duration(seconds: float | None) -> str:
    """A latency for people: 850 us, 3.2 ms, 410 ms, 1.4 s, 2m 05s (empty for None)."""
    if seconds is None:
        return ""
    if seconds < 0.001:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 0.01:
        return f"{seconds * 1e3:.1f} ms"
    if seconds < 1:
        return f"{seconds * 1e3:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    return _age(seconds)


def _json(value: Any, indent: int | None = None) -> str:
    """JSON for people (autoescaped by the template, unlike `tojson`'s \u003c escapes)."""
    return json.dumps(value, indent=indent, ensure_ascii=False, default=str)


#: What the banner of every page shows of each paused queue's reason (the whole is on /queues), and
#: how many paused queues it names (the others: "and N more").
BANNER_REASON, BANNER_QUEUES = 80, 5


def _short(text: Any, limit: int = BANNER_REASON) -> str:
    """The templates' `short` filter: `inputs.shorten`, to the banner's width unless told."""
    return shorten(text, limit)


def state_badge(state: Any, big: bool = False) -> Markup:
    """The one way a page shows a state (a job's, a workflow's, a node's): a badge in its tone
    (`reliable.state_tones`), so FAILED is the same red on every page."""
    name = str(getattr(state, "value", state))
    return Markup('<span class="state tone-{}{}" data-state="{}">{}</span>').format(
        tone(name), " big" if big else "", name, name)


templates = Jinja2Templates(directory=str(_HERE / "templates"))
templates.env.filters.update(iso=_iso, age=_age, json=_json, short=_short, duration=_duration)
templates.env.globals.update(state_badge=state_badge)
templates.env.filters.update(fields=detail_fields)
# A job id as the one path segment `url_for('job', ...)` would put in its link: a page listing hundreds
# of jobs builds `{{ jobs_url }}/{{ id|segment }}` (url_for walks the app's routes on every call).
templates.env.filters.update(segment=JobIdConvertor().to_string)
templates.env.globals.update(FOLD_FROM=FOLD_FROM)
templates.env.globals.update(BANNER_QUEUES=BANNER_QUEUES)
templates.env.globals.update(STATES=[s.value for s in JobStatus], COMMANDS=COMMAND_ORDER)


def render(request: Request, template: str, http_status: int = 200, **context: Any) -> HTMLResponse:
    """A page: `template` with the session's CSRF token, the flash messages and `context`."""
    context.setdefault("principal", None)
    if context["principal"] is not None and "paused_queues" not in context:  # the banner of every page
        context["paused_queues"] = _paused_queues(request)
    flashes = request.session.pop("flash", []) if not template.startswith("_") else []
    return templates.TemplateResponse(request, template, {"csrf": csrf_token(request), "csrf_field": CSRF_FIELD,
                                                          "flashes": flashes, **context}, status_code=http_status)


def _paused_queues(request: Request) -> list[Any]:
    """The paused queues for the banner ([] when they cannot be read: the page still renders)."""
    try:
        return list(state_of(request).queue_pauses().pauses)
    except ReliableError:
        return []


def flash(request: Request, kind: str, text: str) -> None:
    """A one-time message for the next page of this session (kind: ok or error)."""
    request.session["flash"] = [*request.session.get("flash", []), {"kind": kind, "text": text}]


def error_page(request: Request, status: int, message: str) -> Response:
    """An error as a page."""
    return render(request, "error.html", status, status=status, message=message)


def sign_in_redirect(request: Request) -> Response:
    """To the sign-in page, coming back to where the user was."""
    raw = request.scope.get("raw_path")  # as encoded: a job id's %2F must come back as it was
    here = (raw.decode("latin-1") if raw else quote(request.url.path, safe="/")) + (
        f"?{request.url.query}" if request.url.query else "")
    return RedirectResponse(f"{request.url_for('sign_in')}?next={quote(here, safe='/')}", 303)


async def sign_in_page(request: Request) -> Response:
    """GET/POST /login: sign in with an API token."""
    error = None
    if request.method == "POST":
        await check_csrf(request)  # login CSRF: nobody may sign a user in to their own account
        form = await request.form()
        token = str(form.get("token") or "")
        principal = await sign_in(request, token)
        if principal is not None:
            target = str(request.query_params.get("next") or request.url_for("overview"))
            if not target.startswith("/") or target.startswith("//"):
                target = str(request.url_for("overview"))
            return RedirectResponse(target, 303)
        error = "That token is unknown, revoked or expired."
    return render(request, "login.html", 401 if error else 200, error=error)


async def sign_out_page(request: Request) -> Response:
    """POST /logout."""
    await authenticate(request)  # checks the CSRF token: nobody else may sign a user out
    sign_out(request)
    return RedirectResponse(str(request.url_for("sign_in")), 303)


# -- overview --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    """One bar of a chart, in the SVG's coordinates."""

    x: float
    y: float
    height: float
    label: str


@dataclass(frozen=True)
class Chart:
    """A bar chart rendered as inline SVG: one bar per minute."""

    title: str
    summary: str
    top: str
    start: str
    end: str
    bars: tuple[Bar, ...]
    bad: bool = False
    width: int = 600
    height: int = 120
    bar_width: float = 10.0


def chart(title: str, minutes: Sequence[float], values: Sequence[float | None], *, unit: str,
          top: float | None = None, bad: bool = False, every: str = "minute",
          value_text: Callable[[float], str] | None = None) -> Chart:
    """A bar chart of `values` (one bar per bucket starting at `minutes`, labelled per `every`: minute,
    15 minutes, hour) scaled to `top` (default: the largest value)."""
    shown = [v or 0.0 for v in values]

    def text(value: float) -> str:
        return value_text(value) if value_text is not None else f"{value:g}{unit}"

    ceiling = top if top is not None else max([*shown, 0.0]) or 1.0
    width, height = 600, 120
    step = width / max(len(shown), 1)

    def stamp(at: float) -> str:
        return _iso(at)[11:16] + "Z" if every == "minute" else _iso(at)[5:16].replace("T", " ") + "Z"

    bars = tuple(Bar(x=i * step, y=height - height * v / ceiling, height=height * v / ceiling,
                     label=f"{stamp(m)}: {text(v)}")
                 for i, (m, v) in enumerate(zip(minutes, shown, strict=True)) if v > 0)
    summary = f"{title}: highest {text(max([*shown, 0.0]))} per {every}" if shown else f"{title}: no data"
    return Chart(title, summary, text(ceiling), stamp(minutes[0]) if minutes else "",
                 stamp(minutes[-1]) if minutes else "", bars, bad, width, height, step * 0.8)


#: The overview's chart windows: name -> (what the page says, each bar's span).
CHART_WINDOWS: dict[str, tuple[str, str]] = {"1h": ("last hour", "minute"), "24h": ("last 24 hours", "15 minutes"),
                                             "7d": ("last 7 days", "hour")}


def _overview_context(data: Overview, series: History, queues_total: int) -> dict[str, Any]:
    ok, failed = series.outcomes["succeeded"], series.outcomes["failed"]
    rates = [round(100 * f / (s + f), 1) if s + f else 0.0 for s, f in zip(ok, failed, strict=True)]
    states = [s for s in (st.value for st in JobStatus) if any(k[0] == s for k in data.counts)]
    span, every = CHART_WINDOWS[series.window]
    minutes = series.buckets
    return {"data": data, "states": states, "by_state": data.by_state(), "window": series.window, "span": span,
            "queue_rows": data.busiest(OVERVIEW_QUEUES), "queues_total": queues_total,
            "windows": CHART_WINDOWS,
            "latency": data.latency.as_dict() if data.latency is not None else None,
            "charts": [chart(f"Succeeded per {every}", minutes, ok, unit="", every=every),
                       chart(f"Failure rate per {every}", minutes, rates, unit="%", top=100.0, bad=True, every=every),
                       chart(f"Run time p95 per {every}", minutes, series.run_p95, unit="", every=every,
                             value_text=_duration)]}


async def _overview_figures(request: Request) -> dict[str, Any]:
    state, window = state_of(request), query_window(request)
    data = await run_in_threadpool(state.overview)
    total = len(queue_names(data, await run_in_threadpool(state.queue_pauses)))  # the paused ones too
    return _overview_context(data, await run_in_threadpool(state.history, window), total)


async def overview_page(request: Request) -> Response:
    """GET /: jobs by state and queue, latency, throughput and failure rate, oldest pending job per queue."""
    principal = await authenticate(request)
    return render(request, "overview.html", principal=principal, **await _overview_figures(request))


async def overview_live(request: Request) -> Response:
    """GET /overview/live: the overview's figures alone (the page polls it)."""
    principal = await authenticate(request)
    return render(request, "_overview_live.html", principal=principal, **await _overview_figures(request))


# -- job lists -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ListView:
    """A job listing: all jobs with a filter form, or one state fixed (the DLQ, REVIEW)."""

    route: str
    title: str
    fixed: tuple[JobStatus, ...] = ()
    exclude_discarded: bool = False
    intro: str = ""

    @property
    def commands(self) -> tuple[str, ...]:
        """The commands its bulk form offers: every command, or on a fixed-state view only those
        the state machine lets act on its states (`commands.command_states`): the dead letters are
        requeued, restarted or discarded, never paused."""
        if not self.fixed:
            return COMMANDS
        return tuple(c for c in COMMANDS if set(command_states(c)) & set(self.fixed))


#: The list pages by route name.
VIEWS = {
    "jobs": ListView("jobs", "Jobs"),
    "dlq": ListView("dlq", "Dead letters", (JobStatus.DEAD,), True,
                    "DEAD jobs not discarded: requeue or restart them, or discard them (purge: the same "
                    "command; their rows go with retention, reliable db prune --state dead)."),
    "review": ListView("review", "Review", (JobStatus.REVIEW,), False,
                       "Jobs whose side effect is uncertain: check the downstream system, then reconcile."),
}


def job_filter(form: Mapping[str, Any], view: ListView) -> JobFilter:
    """The JobFilter a list page's form (`form`: field -> text, "state" -> list) asks for in `view`: the
    API's rule (`selection.filter_from_params`), the form's `search` being the API's `q`."""
    params: dict[str, object] = {name: form[name] for name in _TEXT_FILTERS if name != "search"}
    params["q"] = form["search"]
    params["state"] = [] if view.fixed else list(form["state"])
    flt = filter_from_params(params)
    if view.fixed:
        flt = dataclasses.replace(flt, statuses=view.fixed)
    return dataclasses.replace(flt, exclude_discarded=view.exclude_discarded)


def list_form(params: QueryParams | FormData) -> dict[str, Any]:
    """A list page's filter fields (text, `state` as a list, `limit`) from a query or a form."""
    form: dict[str, Any] = {name: str(params.get(name) or "").strip() for name in _TEXT_FILTERS}
    form["state"] = [str(value) for value in params.getlist("state")]
    try:
        form["limit"] = int(str(params.get("limit") or "50"))
    except ValueError:
        form["limit"] = 50
    if form["limit"] not in _PAGE_SIZES:
        form["limit"] = 50
    return form


def _query(form: Mapping[str, Any], **extra: str) -> str:
    pairs: list[tuple[str, str]] = [("state", s) for s in form["state"]]
    pairs += [(name, form[name]) for name in _TEXT_FILTERS if form[name]]
    if form["limit"] != 50:
        pairs.append(("limit", str(form["limit"])))
    pairs += [(k, v) for k, v in extra.items() if v]
    return urlencode(pairs)


async def _job_list(request: Request, view: ListView) -> Response:
    principal = await authenticate(request)
    form = {**list_form(request.query_params), "limit": query_int(request, "limit", DEFAULT_LIMIT, MAX_LIMIT)}
    cursor = query_cursor(request)
    here = str(request.url_for(view.route))
    context: dict[str, Any] = {"principal": principal, "view": view, "form": form, "jobs": [], "next_url": None,
                               "first_url": f"{here}?{_query(form)}" if cursor else None, "error": None,
                               "selectable": principal.may_act}
    try:
        flt = job_filter(form, view)
        page = await run_in_threadpool(functools.partial(page_jobs, state_of(request).store, flt,
                                                         reader=principal.reader,
                                                         limit=form["limit"], cursor=cursor))
    except StoreError:  # also a ConfigError when misconfigured: the app's handler, which hides its text
        raise
    except ConfigError as exc:
        return render(request, "jobs.html", 400, **{**context, "error": str(exc)})
    next_url = f"{here}?{_query(form, cursor=page.next_cursor)}" if page.next_cursor else None
    patterns = state_of(request).config.redact
    shown = [masked_job(job, principal, patterns) for job in page.jobs]
    known = await run_in_threadpool(known_names, state_of(request).store)
    return render(request, "jobs.html", **{**context, "jobs": shown, "next_url": next_url, "known": known,
                                            "bulk_commands": view.commands})


async def jobs_page(request: Request) -> Response:
    """GET /jobs: jobs matching the filter form, newest change first, a page at a time."""
    return await _job_list(request, VIEWS["jobs"])


async def dlq_page(request: Request) -> Response:
    """GET /dlq: the dead letters (DEAD, not discarded)."""
    return await _job_list(request, VIEWS["dlq"])


async def review_page(request: Request) -> Response:
    """GET /review: the jobs waiting for a person (REVIEW)."""
    return await _job_list(request, VIEWS["review"])


# -- one job ---------------------------------------------------------------------------------------

#: How many of a job's events one page of its history shows (newest first; older ones a page further).
HISTORY_PAGE = 200
#: The states in which a job's last error is its present (shown as an error); in any other state
#: (it succeeded, was cancelled, runs again...) it is history, shown as the earlier error it was.
ERROR_STATES: frozenset[str] = frozenset(s.value for s in (*FAILURE_STATES, JobStatus.RETRY_WAIT))
templates.env.globals.update(ERROR_STATES=ERROR_STATES)


def signature(job: Mapping[str, Any]) -> str:
    """What decides the actions a job offers: its state and the flags its worker has yet to observe."""
    flags = "".join(flag[0] for flag in ("pause_requested", "stop_requested", "cancel_requested") if job[flag])
    return f"{job['status']}:{flags}"


def _actions(detail: Mapping[str, Any], principal: Principal) -> list[dict[str, Any]]:
    """job_detail's actions in COMMANDS order, each with `enabled` and `why` (what it does, or why not)."""
    job = detail["job"]
    out = []
    for action in sorted(detail["actions"], key=lambda a: COMMANDS.index(a["command"])):
        why = action["message"].removeprefix(f"job {job['job_id']}: ")
        if not action["permitted"]:
            why = (f"not permitted: {principal.name} ({principal.role}) may not {action['command']} jobs of "
                   f"queue {job['queue']!r}")
        out.append({**action, "enabled": action["allowed"] and action["permitted"], "why": why})
    return out


async def job_page(request: Request) -> Response:
    """GET /jobs/{job_id}: everything about one job and the actions it offers (a prefix redirects)."""
    principal = await authenticate(request)
    state = state_of(request)
    given = request.path_params["job_id"]
    job_id = await run_in_threadpool(resolve_job_id, state.store, given)
    if job_id != given:
        query = f"?{request.url.query}" if request.url.query else ""
        return RedirectResponse(f"{request.url_for('job', job_id=job_id)}{query}", 303)
    event = request.query_params.get("event") or None
    before = query_before(request)
    control = state.control_for(principal)
    detail = await run_in_threadpool(functools.partial(job_detail, control, job_id, principal, state.config.redact,
                                                       events=[event] if event else None, before=before,
                                                       event_limit=HISTORY_PAGE))
    names = await run_in_threadpool(event_names, state.store, job_id)
    return render(request, "job.html", principal=principal, d=detail, job=detail["job"], event=event,
                  before=before, event_names=names, actions=_actions(detail, principal),
                  signature=signature(detail["job"]), runs=runs(reversed(detail["events"])),
                  effect_groups=group_effects(detail["effects"]),
                  )


async def job_message_download(request: Request) -> Response:
    """GET /jobs/{job_id}/message: the job's whole message as a JSON file, masked for the user (the
    job's page leaves it out above `queries.MAX_SHOWN_MESSAGE_BYTES`)."""
    principal = await authenticate(request)
    state = state_of(request)
    job_id = request.path_params["job_id"]
    message = await run_in_threadpool(job_message, state.store, job_id, principal, state.config.redact)
    return JSONResponse(message, headers={"Content-Disposition": 'attachment; filename="message.json"'})


async def job_status(request: Request) -> Response:
    """GET /jobs/{job_id}/status: the job's status line alone (its page polls it)."""
    principal = await authenticate(request)
    store = state_of(request).store
    job = await run_in_threadpool(store.get, request.path_params["job_id"])
    return render(request, "_job_status.html", principal=principal, job=job.as_dict(),
                  signature=signature(job.as_dict()))


async def job_action(request: Request) -> Response:
    """POST /jobs/{job_id}/actions/{command}: run one command through Control; back to the job with
    what happened. A command Control refuses as not authorized is a 403 page (it audited the attempt)."""
    principal = await authenticate(request)  # checks the CSRF token of a session
    command = request.path_params["command"]
    if command not in COMMANDS:
        raise HTTPException(404, f"no command {command!r} (known: {', '.join(COMMANDS)})")
    state = state_of(request)
    job_id = await run_in_threadpool(resolve_job_id, state.store, request.path_params["job_id"])
    form = await request.form()
    kwargs: dict[str, Any] = {"reason": str(form.get("reason") or "").strip() or None}
    if command in ("restart", "requeue"):
        kwargs["allow_duplicate_side_effects"] = form.get("confirm_duplicates") == "yes"
    if command == "reconcile":
        kwargs["resolution"] = str(form.get("resolution") or "")
    method = getattr(state.control_for(principal), command)
    try:
        result = await run_in_threadpool(functools.partial(method, job_id, **kwargs))
    except (NotAuthorized, JobNotFound, StoreError):  # a store error's text names the database: the app's handler
        raise
    except ReliableError as exc:
        flash(request, "error", f"{command} refused: {str(exc).removeprefix(f'job {job_id}: ')}")
    else:
        warnings = "".join(f" Warning: {w}." for w in result.warnings)
        flash(request, "ok", f"{command}: {result.message}.{warnings}")
    return RedirectResponse(str(request.url_for("job", job_id=job_id)), 303)


def routes() -> list[BaseRoute]:
    """The console's routes."""
    return [
        Route("/", overview_page, name="overview"),
        Route("/overview/live", overview_live, name="overview_live"),
        Route("/jobs", jobs_page, name="jobs"),
        Route("/dlq", dlq_page, name="dlq"),
        Route("/review", review_page, name="review"),
        JobRoute("/jobs/{job_id}", job_page, name="job"),
        JobRoute("/jobs/{job_id}/status", job_status, name="job_status"),
        JobRoute("/jobs/{job_id}/message", job_message_download, name="job_message"),
        JobRoute("/jobs/{job_id}/actions/{command}", job_action, methods=["POST"], name="job_action"),
        Route("/login", sign_in_page, methods=["GET", "POST"], name="sign_in"),
        Route("/logout", sign_out_page, methods=["POST"], name="sign_out"),
        Mount("/static", app=StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]
