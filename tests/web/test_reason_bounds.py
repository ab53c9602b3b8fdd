"""Issue 38: one length limit for every reason, whatever surface takes it, on both databases.

A 250,000-character queue pause reason was accepted and repeated in the "Paused:" banner of every
console page. Now `reliable.inputs.MAX_TEXT` bounds every reason: the API routes, the console forms
and the CLI commands that take one are enumerated (the OpenAPI document, the templates' forms, the
command tree) and each must refuse one character more, naming the field and the limit, writing
nothing. A new surface taking a reason is enumerated too: it fails here until it refuses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import reliable.web
from reliable import queue_pauses
from reliable.cli.main import cli
from reliable.inputs import MAX_TEXT
from reliable.operators import Operator
from reliable.store import NewJob, StateStore
from reliable.web.openapi import document

from support import cli_commands
from web_support import Tokens, bearer, session

LONG = "x" * (MAX_TEXT + 1)
SAYS = f"at most {MAX_TEXT} characters, this one has {MAX_TEXT + 1}"
JOB = "job-1"
#: What a path parameter of a reason-taking API route is given (an unknown one fails the test).
PATH_VALUES = {"job_id": JOB, "queue": "billing", "workflow_id": "wf-1", "name": "nightly", "worker_id": "w-1",
               "actor": "charge"}
#: Fields besides `reason` a route requires, by path suffix.
EXTRA_FIELDS = {"/reconcile": {"resolution": "succeeded"}, "/resolve": {"resolution": "succeeded"},
                "/concurrency": {"concurrency": 1},
                "/api/v1/operations": {"command": "pause", "filter": {"queue": "billing"}}}
#: The console's forms with a reason field, by route name: the URL and the other fields they post.
CONSOLE_FORMS = {
    "job_action": (f"/jobs/{JOB}/actions/pause", {}),
    "bulk": ("/bulk", {"command": "pause", "queue": "billing"}),
    "queue_action": ("/queues/billing/actions/pause", {}),
    "worker_action": ("/workers/w-1/actions/stop", {}),
    "limit_action": ("/queues/limits/charge", {"concurrency": "1"}),
    "schedule_action": ("/schedules/nightly/actions/pause", {}),
    "workflow_action": ("/workflows/wf-1/actions/pause", {}),
}
TEMPLATES = Path(reliable.web.__file__).parent / "templates"


def _schema(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    return doc["components"]["schemas"][ref.rsplit("/", 1)[-1]] if ref else schema


def api_routes() -> list[str]:
    """Every API route whose body takes a reason (all are POSTs)."""
    doc = document()
    found = []
    for path, methods in doc["paths"].items():
        for method, operation in methods.items():
            body = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
            if "reason" in _schema(doc, body.get("schema", {})).get("properties", {}):
                assert method == "post", path
                found.append(path)
    return found


def console_forms() -> set[str]:
    """The route names of every console form with a reason field (read from the templates)."""
    found = set()
    for template in TEMPLATES.glob("*.html"):
        for form in re.findall(r"<form\b.*?</form>", template.read_text(), re.S):
            # a form whose action is built from a prefix (no url_for per row) names its route
            action = re.search(r"url_for\('(\w+)'", form) or re.search(r'data-route="(\w+)"', form)
            if 'name="reason"' in form and action:
                found.add(action.group(1))
    return found


def reason_commands() -> list[tuple[str, ...]]:
    """Every command with a --reason option."""
    return [path for path, command in cli_commands()
            if any("--reason" in getattr(p, "opts", ()) for p in command.params)]


def nothing_written(store: StateStore) -> None:
    assert [e.event for e in store.events(JOB)] == ["enqueued"]
    assert queue_pauses.events(store, "billing") == [] and queue_pauses.paused(store).pauses == ()


API_ROUTES = api_routes()


def test_the_enumerations_find_every_kind_of_surface() -> None:
    assert len(API_ROUTES) >= 20 and any("/queues/" in r for r in API_ROUTES) and "/api/v1/operations" in API_ROUTES
    assert console_forms() == set(CONSOLE_FORMS), "a console form takes a reason: add it to CONSOLE_FORMS"
    commands = {" ".join(c) for c in reason_commands()}
    assert {"pause", "retry", "queues pause", "schedules trigger", "workflow cancel", "tokens revoke",
            "db prune", "dlq requeue", "review resolve"} <= commands


@pytest.mark.parametrize("path", API_ROUTES)
def test_every_api_route_refuses_an_over_long_reason(store: StateStore, tokens: Tokens, client: TestClient,
                                                     path: str) -> None:
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    url = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m.group(1)], path)
    body = {"reason": LONG, **next((v for k, v in EXTRA_FIELDS.items() if path.endswith(k)), {})}
    response = client.post(url, json=body, headers=bearer(tokens.admin))
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "'reason'" in message and SAYS in message, message
    nothing_written(store)


@pytest.mark.parametrize("route", sorted(CONSOLE_FORMS))
def test_every_console_form_refuses_an_over_long_reason(store: StateStore, tokens: Tokens, route: str) -> None:
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    client, csrf = session(store, tokens.admin)
    url, fields = CONSOLE_FORMS[route]
    response = client.post(url, data={**fields, "reason": LONG, "csrf_token": csrf})
    assert SAYS in response.text and "reason" in response.text, response.text[-3000:]
    assert LONG not in response.text
    nothing_written(store)


@pytest.mark.parametrize("command", reason_commands(), ids=" ".join)
def test_every_cli_command_refuses_an_over_long_reason(command: tuple[str, ...]) -> None:
    result = CliRunner().invoke(cli, [*command, "--reason", LONG], env={"RELIABLE_OPERATOR": "carol"})
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--reason'" in result.output and SAYS in result.output, result.output


def test_a_cli_queue_pause_with_an_over_long_reason_writes_nothing(store: StateStore, store_url: str) -> None:
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    result = CliRunner().invoke(cli, ["queues", "pause", "billing", "--reason", "y" * 250_000, "--store", store_url],
                                env={"RELIABLE_OPERATOR": "carol"})
    assert result.exit_code == 2 and "at most 1000 characters, this one has 250000" in result.output
    nothing_written(store)


def test_names_a_person_enters_are_bounded_too(store: StateStore) -> None:
    from reliable.access import ApiTokens
    from reliable.errors import TextTooLong

    with pytest.raises(TextTooLong, match="field 'operator': at most 255 characters"):
        Operator.resolve("o" * 256)
    with pytest.raises(TextTooLong, match="field 'RELIABLE_OPERATOR': at most 255 characters"):
        Operator.resolve(environ={"RELIABLE_OPERATOR": "o" * 256})
    with pytest.raises(TextTooLong, match="field 'name': at most 255 characters"):
        ApiTokens(store).create("n" * 256, "viewer")
    assert ApiTokens(store).list() == []


def test_the_banner_shows_reasons_shortened_and_the_queue_page_whole(store: StateStore, tokens: Tokens) -> None:
    operator = Operator("carol", "host", "test")
    for index in range(8):
        queue_pauses.pause(store, f"q{index}", reason=f"r{index}-" + "z" * (MAX_TEXT - 3), identity=operator)
    client, _ = session(store, tokens.admin)
    page = client.get("/jobs").text
    banner = re.search(r'<p class="flash flash-error banner-paused".*?</p>', page, re.S)
    assert banner is not None
    text = banner.group()
    assert text.count("\u2026") == 5 and "and 3 more" in text and len(text) < 2500
    assert "z" * 100 not in page
    queues = client.get("/queues").text
    assert all(f"r{index}-" + "z" * (MAX_TEXT - 3) in queues for index in range(8))


def test_a_filters_text_is_bounded_through_the_api_and_the_cli(store: StateStore, tokens: Tokens,
                                                                client: TestClient) -> None:
    """A bulk operation keeps its filter (a refused one too): `q` is bounded as a reason, each name of
    a list as a name, by the one parser of filters (`selection.filter_from_params`), before anything is kept."""
    from control.cli_api_server import serve

    from reliable.inputs import MAX_NAME
    from reliable.web import WebConfig, create_app

    name_says = f"at most {MAX_NAME} characters, this one has {MAX_NAME + 1}"
    for who in (tokens.admin, tokens.operator):
        response = client.post("/api/v1/operations", headers=bearer(who),
                               json={"command": "pause", "filter": {"queue": "billing", "q": LONG}, "reason": "r"})
        assert response.status_code == 400 and "field 'q'" in response.text and SAYS in response.text, response.text
        response = client.post("/api/v1/operations", headers=bearer(who), json={
            "command": "pause", "filter": {"queue": ["billing", "q" * (MAX_NAME + 1)]}, "reason": "r",
            "dry_run": True})
        assert response.status_code == 400 and "field 'queue'" in response.text and name_says in response.text
    assert client.get("/api/v1/operations", headers=bearer(tokens.admin)).json()["operations"] == []
    response = client.get("/api/v1/jobs", params={"actor": "a" * (MAX_NAME + 1)}, headers=bearer(tokens.admin))
    assert response.status_code == 400 and "field 'actor'" in response.text and name_says in response.text
    assert client.get("/api/v1/jobs", params={"actor": "a" * MAX_NAME}, headers=bearer(tokens.admin)).status_code == 200

    env = {"RELIABLE_API_TOKEN": tokens.admin, "RELIABLE_OPERATOR": None, "RELIABLE_STORE": None}
    with serve(create_app(store, config=WebConfig(secret_key="s"))) as url:
        for args in (["jobs", "list", "--actor", "a" * (MAX_NAME + 1)],
                     ["pause", "--actor", "a" * (MAX_NAME + 1), "--reason", "r", "--dry-run"]):
            result = CliRunner().invoke(cli, [*args, "--api", url], env=env)
            assert result.exit_code != 0 and "'actor'" in result.output and name_says in result.output, result.output
    assert client.get("/api/v1/operations", headers=bearer(tokens.admin)).json()["operations"] == []


def test_a_tokens_revocation_keeps_its_reason_whole_or_refuses_it(store: StateStore, store_url: str) -> None:
    """`revoked_by` is "operator: reason" in 255 characters: a reason that does not fit is refused, never cut,
    by `ApiTokens.revoke` itself (the CLI's --reason takes MAX_TEXT)."""
    from reliable.access import ApiTokens
    from reliable.errors import InvalidReason, TextTooLong

    tokens = ApiTokens(store)
    record, token = tokens.create("laptop", "admin")
    with pytest.raises(TextTooLong, match="field 'reason': at most 248 characters, this one has 249"):
        tokens.revoke(record.token_id, by="carol", reason="r" * 249)
    with pytest.raises(TextTooLong, match="field 'operator': at most 255 characters"):
        tokens.revoke(record.token_id, by="c" * 256)
    with pytest.raises(InvalidReason, match="control characters"):
        tokens.revoke(record.token_id, by="carol", reason="a\x00b")
    result = CliRunner().invoke(cli, ["tokens", "revoke", record.token_id, "--reason", "r" * 300, "--store", store_url],
                                env={"RELIABLE_OPERATOR": "carol"})
    assert result.exit_code != 0 and "at most 248 characters, this one has 300" in result.output, result.output
    assert tokens.authenticate(token) is not None  # nothing written
    assert tokens.revoke(record.token_id, by="carol", reason="r" * 248).revoked_by == "carol: " + "r" * 248


def test_prune_checks_its_audit_records_reason_itself(store: StateStore) -> None:
    from reliable.errors import ReasonRequired, TextTooLong
    from reliable.store import retention
    from reliable.store.schema import operations

    cut = store.now()
    with pytest.raises(TextTooLong, match="prune: field 'reason': " + SAYS):
        retention.prune(store, cut, operator="carol", reason=LONG)
    with pytest.raises(TextTooLong, match="prune: field 'operator': at most 255 characters"):
        retention.prune(store, cut, operator="c" * 256, reason="retention")
    with pytest.raises(ReasonRequired, match="prune needs a reason"):
        retention.prune(store, cut, operator="carol", reason=" ")
    with store.read() as conn:
        assert conn.execute(operations.select()).first() is None  # no run, no audit record
    assert retention.prune(store, cut, operator="carol", reason="x" * MAX_TEXT).complete
