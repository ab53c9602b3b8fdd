"""Search is one right (issue 38): every route and command that takes a job filter, x who asks.

A match against a job's arguments tells whether they contain a guess, so a caller who sees them
masked must not get one from any surface: not from a listing, a bulk preview (counted or dry run),
a console form or the CLI's `--api`. The rule lives in one place (`reliable.store.selection.Reader`,
checked by every query of a `JobFilter`); this table proves each surface reaches it.

`SURFACES` names every route of `create_app` and every `reliable` command that takes a job filter.
They are found three ways, and `test_every_filter_surface_is_in_the_table` fails when one is added
without a row: a route whose handler reaches `selection.filter_from_params` (the one parser of a
request's filter) or a query of a filter (`SELECTIONS`: select_jobs, page_jobs, count_jobs,
jobs_to_act_on; a route that reaches one without a filter of the request is in `NOT_FILTERS`
with its reason), an API operation the OpenAPI document gives a `q` parameter or a `filter` body,
and a command with `--api` and a job filter's options.

Each row is asked the same things, on both databases:
- with a search, by an operator scoped to queue `other` (the secret is in queue `billing`) and by a
  viewer: refused, and the right guess answers exactly as a wrong one; an admin's search finds
  the job (so the probe can fail);
- without a search, by that operator: a preview's count and sample hold only the jobs it may act
  on (an admin's hold the others: so can this); a listing shows every job, the out-of-scope ones
  masked (a listing is a read: `reliable.disclosure`).
"""

from __future__ import annotations

import inspect
import json
import os
import re
import typing
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

import click
import pytest
from click.testing import CliRunner
from control.cli_api_server import serve
from starlette.routing import Route
from starlette.testclient import TestClient

from reliable.access import ApiTokens
from reliable.cli.main import cli
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore, bulk_operations, selection
from reliable.web import WebConfig, create_app
from reliable.web.openapi import document

from support import cli_commands
from web_support import bearer, session

SECRET = "s3cret-Zq9"
WRONG = "s3cret-Zq8"
STATES = ("PENDING", "RUNNING", "PAUSED", "FAILED", "DEAD", "REVIEW")
#: What each state is reached by (None: registered only; RUNNING: claimed only).
_ENDING: dict[str, Event | None] = {"FAILED": Event.FAIL, "DEAD": Event.DEAD_LETTER, "REVIEW": Event.NEED_REVIEW,
                                     "PAUSED": Event.PAUSE_OBSERVED}
#: The options (not arguments: `workflow show ID`) of a job filter a CLI command may take (with `--api`,
#: it is a filter surface).
CLI_FILTER_OPTIONS = frozenset({"states", "queue", "actor", "error_class", "older_than", "workflow_id", "owner",
                                "search", "q"})
#: Option names that would match against arguments: a command given one must be probed like the routes.
CLI_SEARCH_OPTIONS = frozenset({"search", "q"})
WHO = ("otto", "vera", "ada")  # an operator of queue `other`, a viewer, an admin


def put_job(store: StateStore, job_id: str, queue: str, state: str) -> None:
    """A job of `queue` in `state`; a billing job's arguments, checkpoint and last error hold SECRET."""
    kwargs = {"password": SECRET, "amount": 12} if queue == "billing" else {"amount": 3}
    store.register(NewJob(job_id, queue, "charge", {"args": [], "kwargs": kwargs, "options": {}}))
    if state == "PENDING":
        return
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    checkpoint = {"api_token": SECRET, "page": 3} if queue == "billing" else {"page": 3}
    store.save_checkpoint(job_id, claim.lease_id, checkpoint, lease_ttl=60)
    event = _ENDING.get(state)
    if event is None:
        return
    said = f"declined password={SECRET}" if queue == "billing" else "declined"
    error = None if event is Event.PAUSE_OBSERVED else ErrorInfo("permanent", "ValueError", said)
    store.finish(job_id, claim.lease_id, event, worker_id="w1", error=error)
    assert store.get(job_id).status is JobStatus(state)


@dataclass
class Rig:
    """The store with a job per state on each queue, a token per caller, the app and (on demand) a served API."""

    store: StateStore
    tokens: dict[str, str]
    stack: ExitStack
    _api: TestClient | None = None
    _sessions: dict[str, tuple[TestClient, str]] = field(default_factory=dict)
    _url: str | None = None

    @property
    def api(self) -> TestClient:
        if self._api is None:
            self._api = self.stack.enter_context(TestClient(create_app(self.store, config=WebConfig(secret_key="s"))))
        return self._api

    def console(self, who: str) -> tuple[TestClient, str]:
        if who not in self._sessions:
            self._sessions[who] = session(self.store, self.tokens[who])
        return self._sessions[who]

    @property
    def url(self) -> str:
        if self._url is None:
            self._url = self.stack.enter_context(serve(create_app(self.store, config=WebConfig(secret_key="s"))))
        return self._url


@pytest.fixture
def rig(store: StateStore) -> Iterator[Rig]:
    for state in STATES:
        put_job(store, f"billing-{state.lower()}", "billing", state)
        put_job(store, f"other-{state.lower()}", "other", state)
    made = ApiTokens(store)
    tokens = {"otto": made.create("otto", "operator", queues=["other"])[1], "vera": made.create("vera", "viewer")[1],
              "ada": made.create("ada", "admin")[1]}
    with ExitStack() as stack:
        yield Rig(store, tokens, stack)


@dataclass(frozen=True)
class Answer:
    """What a surface answered: refused (403 or a refusal exit), the job ids it counted or listed, its text."""

    refused: bool
    job_ids: frozenset[str]
    text: str


Ask = Callable[[Rig, str, "str | None"], Answer]


@dataclass(frozen=True)
class Surface:
    """A route or command that takes a job filter: `acting` (a bulk preview: counts what one may act on)
    or `listing` (a read); `ask(rig, who, search)` runs it, searching for `search` when given."""

    kind: Literal["acting", "listing"]
    ask: Ask


_ID_CELL = re.compile(r'<td class="id"><a [^>]*><code>([^<]+)</code>')


def _ids_of_page(text: str) -> frozenset[str]:
    return frozenset(_ID_CELL.findall(text))


def _api_listing(path: str) -> Ask:
    def ask(rig: Rig, who: str, search: str | None) -> Answer:
        params = {"q": search, "queue": "billing"} if search else {"limit": "500"}
        response = rig.api.get(path, params=params, headers=bearer(rig.tokens[who]))
        if response.status_code == 403:
            return Answer(True, frozenset(), response.text)
        assert response.status_code == 200, response.text
        return Answer(False, frozenset(j["job_id"] for j in response.json()["jobs"]), response.text)
    return ask


def _api_preview(rig: Rig, who: str, search: str | None) -> Answer:
    flt: dict[str, Any] = {"queue": ["billing"], "q": search} if search else {"state": list(STATES)}
    response = rig.api.post("/api/v1/operations", headers=bearer(rig.tokens[who]),
                            json={"command": "requeue", "filter": flt, "reason": "probe", "dry_run": True})
    if response.status_code == 403:
        return Answer(True, frozenset(), response.text)
    assert response.status_code == 200, response.text
    body = response.json()
    ids = frozenset(body["sample"]) | {job["job_id"] for job in body["sample_jobs"]}
    assert body["total"] == len(body["sample"])  # fewer than the sample's size: the sample is every job
    return Answer(False, ids, response.text)


def _console_listing(path: str) -> Ask:
    def ask(rig: Rig, who: str, search: str | None) -> Answer:
        client, _ = rig.console(who)
        response = client.get(path, params={"search": search, "queue": "billing"} if search else {"limit": "200"})
        if response.status_code == 403:
            return Answer(True, frozenset(), response.text)
        assert response.status_code == 200, response.text
        return Answer(False, _ids_of_page(response.text), response.text)
    return ask


def _console_bulk(rig: Rig, who: str, search: str | None) -> Answer:
    client, csrf = rig.console(who)
    form: dict[str, Any] = {"csrf_token": csrf, "view": "jobs", "command": "requeue", "scope": "filter",
                            "reason": "probe", "limit": "200"}
    form.update({"search": search, "queue": "billing"} if search else {"state": list(STATES)})
    response = client.post("/bulk", data=form)
    if response.status_code == 403:
        return Answer(True, frozenset(), response.text)
    assert response.status_code == 200 and "/operations/" in str(response.url), response.text
    total = re.search(r"requeue · (\d+) job", response.text)
    assert total is not None, response.text
    ids = _ids_of_page(response.text)
    assert len(ids) == int(total.group(1))  # fewer than the sample's size: the sample is every job
    return Answer(False, ids, response.text)


def _run_cli(rig: Rig, who: str, *args: str) -> tuple[int, str]:
    env: dict[str, str | None] = {k: None for k in os.environ if k.startswith("RELIABLE_")}
    env["RELIABLE_API_TOKEN"] = rig.tokens[who]
    result = CliRunner().invoke(cli, [*args, "--api", rig.url, "--json"], env=env)
    return result.exit_code, result.stdout if result.exit_code == 0 else result.output


def _cli_listing(*command: str) -> Ask:
    def ask(rig: Rig, who: str, search: str | None) -> Answer:
        assert search is None, "no `reliable` command searches arguments (see test_the_cli_has_no_search_option)"
        code, out = _run_cli(rig, who, *command, "--limit", "200")
        assert code == 0, out
        listed = json.loads(out)
        rows = listed["jobs"] if isinstance(listed, dict) else listed
        return Answer(False, frozenset(row["job_id"] for row in rows), out)
    return ask


def _cli_preview(*command: str) -> Ask:
    def ask(rig: Rig, who: str, search: str | None) -> Answer:
        assert search is None, "no `reliable` command searches arguments (see test_the_cli_has_no_search_option)"
        code, out = _run_cli(rig, who, *command, "--actor", "charge", "--reason", "probe", "--dry-run")
        if code != 0:
            return Answer(True, frozenset(), out)
        shown = json.loads(out)
        ids = frozenset(job["job_id"] for job in shown.get("sample", []))
        assert shown["matched"] == len(ids)
        return Answer(False, ids, out)
    return ask


#: Every route (method, path) and `reliable` command (space-separated) that takes a job filter.
SURFACES: dict[str, Surface] = {
    "GET /api/v1/jobs": Surface("listing", _api_listing("/api/v1/jobs")),
    "GET /api/v1/dlq": Surface("listing", _api_listing("/api/v1/dlq")),
    "GET /api/v1/review": Surface("listing", _api_listing("/api/v1/review")),
    "POST /api/v1/operations": Surface("acting", _api_preview),
    "GET /jobs": Surface("listing", _console_listing("/jobs")),
    "GET /dlq": Surface("listing", _console_listing("/dlq")),
    "GET /review": Surface("listing", _console_listing("/review")),
    "POST /bulk": Surface("acting", _console_bulk),
    "jobs list": Surface("listing", _cli_listing("jobs", "list")),
    "dlq list": Surface("listing", _cli_listing("dlq", "list")),
    "review list": Surface("listing", _cli_listing("review", "list")),
    "pause": Surface("acting", _cli_preview("pause")),
    "stop": Surface("acting", _cli_preview("stop")),
    "cancel": Surface("acting", _cli_preview("cancel")),
    "resume": Surface("acting", _cli_preview("resume")),
    "restart": Surface("acting", _cli_preview("restart")),
    "requeue": Surface("acting", _cli_preview("requeue")),
    "retry": Surface("acting", _cli_preview("retry")),  # requeue's old name, kept as an alias
    "reconcile": Surface("acting", _cli_preview("reconcile", "--as", "succeeded")),
    "dlq requeue": Surface("acting", _cli_preview("dlq", "requeue")),
    "dlq discard": Surface("acting", _cli_preview("dlq", "discard")),
    "dlq purge": Surface("acting", _cli_preview("dlq", "purge")),
    "review resolve": Surface("acting", _cli_preview("review", "resolve", "--as", "succeeded")),
}
CLI_SURFACES = {name for name in SURFACES if not name.startswith(("GET ", "POST "))}


# -- finding the surfaces ------------------------------------------------------------------------


#: The functions that parse a request's filter or query one: a route reaching any takes a filter.
SELECTIONS = (selection.filter_from_params, selection.select_jobs, selection.page_jobs, selection.count_jobs,
              bulk_operations.jobs_to_act_on)
#: Routes that reach a selection without taking a filter from the request, each with its reason.
_OWN_IDS = "an operation's own counted ids (jobs_with_ids: its sample; Operations.as_seen_by: its ids in scope)"
NOT_FILTERS = {
    "GET /operations/{operation_id}": _OWN_IDS,
    "GET /api/v1/operations": _OWN_IDS,
    "GET /api/v1/operations/{operation_id}": _OWN_IDS,
    "POST /api/v1/operations/{operation_id}/confirm": _OWN_IDS,
    "POST /api/v1/operations/{operation_id}/cancel": _OWN_IDS,
}


def _returned_class(func: Any) -> type | None:
    """The class of reliable `func` is annotated to return, if any (`operations_of` -> Operations)."""
    try:
        hint = typing.get_type_hints(func).get("return")
    except (NameError, TypeError):
        return None
    return hint if inspect.isclass(hint) and hint.__module__.startswith("reliable.") else None


def _callees(func: Any) -> list[Any]:
    """What `func` may call: the globals it names (and their names on reliable's modules it names:
    `selection.page_jobs`), and the methods of those names on the classes of reliable it names or gets
    back from what it calls (`operations_of(request).preview`)."""
    names: set[str] = set()
    codes = [func.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes.extend(const for const in code.co_consts if inspect.iscode(const))
    found = [value for name in names if (value := func.__globals__.get(name)) is not None]
    found += [getattr(module, name) for module in func.__globals__.values()
              if inspect.ismodule(module) and module.__name__.startswith("reliable.")
              for name in names if inspect.isfunction(getattr(module, name, None))]
    classes = {value for value in func.__globals__.values()
               if inspect.isclass(value) and value.__module__.startswith("reliable.")}
    classes |= {cls for value in found if inspect.isfunction(value) and (cls := _returned_class(value))}
    done: set[type] = set()
    while classes - done:
        cls = (classes - done).pop()
        done.add(cls)
        for name in names:
            member = inspect.getattr_static(cls, name, None)
            member = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if inspect.isfunction(member):
                found.append(member)
                if (returned := _returned_class(member)) is not None:
                    classes.add(returned)
    return found


def _reaches(func: Any, targets: tuple[Any, ...], seen: set[Any]) -> set[str]:
    """The names of `targets` `func` calls, directly or through the functions and methods of `reliable` it names."""
    func = inspect.unwrap(func)
    if func in seen or not inspect.isfunction(func):
        return set()
    seen.add(func)
    hit: set[str] = set()
    for found in _callees(func):
        if not inspect.isfunction(found):
            continue
        if found in targets:
            hit.add(found.__name__)
        elif found.__module__.startswith("reliable."):
            hit |= _reaches(found, targets, seen)
    return hit


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _documented_filter_routes() -> set[str]:
    doc = document()
    found = set()
    for path, operations in doc["paths"].items():
        for method, operation in operations.items():
            params = {p.get("name") for p in operation.get("parameters", []) if isinstance(p, dict)}
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            properties = _resolve(doc, body.get("schema", {})).get("properties", {}) if body else {}
            if "q" in params or "filter" in properties:
                found.add(f"{method.upper()} {path}")
    return found


def test_every_filter_surface_is_in_the_table(store: StateStore) -> None:
    app = create_app(store, config=WebConfig(secret_key="s"))
    reached = {f"{method} {route.path}": _reaches(route.endpoint, SELECTIONS, set())
               for route in app.routes if isinstance(route, Route)
               for method in sorted((route.methods or set()) - {"HEAD"})}
    by_code = {route for route, found in reached.items() if found} - set(NOT_FILTERS)
    documented = _documented_filter_routes()
    commands = {" ".join(path) for path, command in cli_commands()
                if {"api_url"} <= {p.name for p in command.params}
                and {p.name for p in command.params if isinstance(p, click.Option)} & CLI_FILTER_OPTIONS}
    assert documented <= by_code, "an API route documents a job filter its handler does not parse"
    assert all(reached[route] for route in NOT_FILTERS), "a route of NOT_FILTERS reaches no selection now"
    assert by_code | commands == set(SURFACES), (
        "a route or command takes a job filter: add it to SURFACES (missing: "
        f"{sorted((by_code | commands) - set(SURFACES))}; gone: {sorted(set(SURFACES) - (by_code | commands))})")
    # Through a method it gets back (`operations_of(request).preview`): what acts counts as the rule says.
    acting = {name for name, surface in SURFACES.items() if surface.kind == "acting" and name in reached}
    assert acting and all("jobs_to_act_on" in reached[name] for name in acting), {n: reached[n] for n in acting}


def test_the_route_walk_finds_a_selection_reached_without_a_filter_parser() -> None:
    """A handler that queries a filter it builds itself is found too (not only one that parses a request's)."""

    def handler() -> None:
        selection.count_jobs(None, selection.JobFilter(), reader=selection.Reader.trusted())  # type: ignore[arg-type]

    assert _reaches(handler, SELECTIONS, set()) == {"count_jobs"}
    assert _reaches(handler, (selection.filter_from_params,), set()) == set()


def test_the_cli_has_no_search_option() -> None:
    """No `reliable` command matches against arguments; one given a search option needs its own probe row."""
    for path, command in cli_commands():
        searches = {p.name for p in command.params} & CLI_SEARCH_OPTIONS
        assert not searches, f"`reliable {' '.join(path)}` searches arguments"


# -- the rule, on every surface ------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(set(SURFACES) - CLI_SURFACES))
def test_a_search_needs_the_right_to_see_every_jobs_arguments(rig: Rig, name: str) -> None:
    ask = SURFACES[name].ask
    for who in ("otto", "vera"):
        right, wrong = ask(rig, who, SECRET), ask(rig, who, WRONG)
        assert right.refused and wrong.refused, (who, right.text[:300])
        assert right.text.replace(SECRET, WRONG) == wrong.text  # no oracle: a right guess answers as a wrong one
    assert "may not search arguments" in ask(rig, "otto", SECRET).text  # a viewer may be refused sooner
    found = ask(rig, "ada", SECRET)
    assert not found.refused and found.job_ids and all(job_id.startswith("billing-") for job_id in found.job_ids)
    assert not ask(rig, "ada", WRONG).job_ids


@pytest.mark.parametrize("name", sorted(SURFACES))
def test_out_of_scope_jobs_are_never_counted_and_always_masked(rig: Rig, name: str) -> None:
    surface = SURFACES[name]
    mine = surface.ask(rig, "otto", None)
    everyone = surface.ask(rig, "ada", None)
    assert not mine.refused and not everyone.refused
    assert any(job_id.startswith("other-") for job_id in mine.job_ids), mine.text[:500]
    assert any(job_id.startswith("billing-") for job_id in everyone.job_ids)  # there is something to leave out
    if surface.kind == "acting":
        assert all(job_id.startswith("other-") for job_id in mine.job_ids), sorted(mine.job_ids)
    else:  # a read: every job, an out-of-scope one masked
        assert mine.job_ids == everyone.job_ids
    assert SECRET not in mine.text and SECRET in everyone.text  # the masking is otto's, not the surface's


def test_a_refused_search_is_recorded_dry_run_or_not(rig: Rig) -> None:
    for dry_run in (True, False):
        response = rig.api.post("/api/v1/operations", headers=bearer(rig.tokens["otto"]),
                                json={"command": "requeue", "filter": {"queue": ["billing"], "q": SECRET},
                                      "reason": "probe", "dry_run": dry_run})
        assert response.status_code == 403 and response.json()["error"]["type"] == "NotAuthorized"
    listed = rig.api.get("/api/v1/operations", headers=bearer(rig.tokens["otto"])).json()["operations"]
    assert [(op["status"], op["operator"], op["total"]) for op in listed] == [("refused", "otto", 0)] * 2
    assert all(op["filter"]["search"] == "***" and "may not search arguments" in op["error"] for op in listed)
    assert SECRET in rig.api.get("/api/v1/operations", headers=bearer(rig.tokens["ada"])).text  # kept for the audit
