"""One name per command on every surface (issue 42 item 5): the console, the API and the CLI say
`requeue` (Control's method, the operators policy's and the event's name); `retry` (and `resolve`
for reconcile) stay accepted as aliases and are never what a surface shows."""

from __future__ import annotations

import re

from reliable.commands import command_states
from reliable.operators import COMMAND_ORDER, SYNONYMS
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.web import api
from reliable.web.console import VIEWS
from reliable.web.openapi import document

from support import cli_commands
from web_support import Tokens, session


def test_the_cli_names_every_command_canonically_and_keeps_the_aliases() -> None:
    commands = dict(cli_commands())
    leaves = {path[-1] for path in commands}
    assert set(COMMAND_ORDER) <= leaves, sorted(set(COMMAND_ORDER) - leaves)
    assert commands[("retry",)] is commands[("requeue",)]  # the alias is the same command
    assert commands[("requeue",)].name == "requeue"
    for alias, canonical in SYNONYMS.items():
        for path, command in commands.items():
            if path[-1] == alias and command is not commands.get((*path[:-1], canonical)):
                assert "alias" in (command.help or "").lower(), f"{' '.join(path)} does not say it is an alias"
    from reliable.cli.main import COMMANDS as TOP
    assert "Alias of `requeue`" in TOP["retry"][1]


def test_the_api_takes_the_canonical_names_and_the_aliases() -> None:
    assert set(api.COMMANDS) == {*COMMAND_ORDER, *SYNONYMS}
    assert {api.COMMANDS[alias] for alias in SYNONYMS} <= set(COMMAND_ORDER)
    paths = {p.rsplit("/", 1)[1] for p in document()["paths"] if p.startswith("/api/v1/jobs/{job_id}/")}
    assert set(COMMAND_ORDER) <= paths


def test_the_console_says_requeue_and_each_list_offers_what_its_states_allow(store: StateStore,
                                                                             tokens: Tokens) -> None:
    for job_id, event in (("dead-1", Event.DEAD_LETTER), ("review-1", Event.NEED_REVIEW)):
        store.register(NewJob(job_id, "exports", "export", {"args": [], "kwargs": {}, "options": {}}))
        claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
        store.finish(job_id, claim.lease_id, event, worker_id="w1", error=ErrorInfo("permanent", "E", "x"))
    client, csrf = session(store, tokens.admin)
    page = client.get("/jobs/dead-1").text
    assert '/actions/requeue"' in page and '<h3 id="act-requeue">Requeue' in page
    for view in VIEWS.values():
        listing = client.get(f"/{view.route}").text
        offered = re.findall(r'<option value="(\w+)">(\w+)</option>', listing.split('name="command"')[1].split(
            "</select>")[0])
        assert all(value == label for value, label in offered), offered  # the option says its command's name
        assert tuple(value for value, _ in offered) == view.commands
        if view.fixed:
            assert all(set(command_states(c)) & set(view.fixed) for c in view.commands)
    assert VIEWS["dlq"].commands == ("restart", "requeue", "discard")  # never pause, stop or cancel
    assert set(VIEWS["jobs"].commands) == set(COMMAND_ORDER)
    for path in ("/jobs/dead-1", "/dlq", "/jobs", "/operations"):
        assert not re.search(r">\s*[Rr]etry\b", client.get(path).text), path
    forged = client.post("/bulk", data={"csrf_token": csrf, "view": "dlq", "command": "pause", "scope": "filter",
                                        "reason": "r"})
    assert "bulk pause refused: dead letters take restart, requeue, discard, not &#39;pause&#39;" in forged.text
    assert store.get("dead-1").status is JobStatus.DEAD
