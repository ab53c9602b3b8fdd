"""Issue 42 items 4 and 5 on the job page and in the API (SQLite and PostgreSQL): a long job's
history folded and paged, event details as fields, the last command's operator and reason, an
earlier error shown as history, and every state badge in its one tone."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reliable.control import Control
from reliable.operators import Operator
from reliable.state_tones import tone
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.schema import job_events
from reliable.web.job_story import FOLD_SHOWN, detail_fields, group_effects, runs

from web_support import Tokens, bearer, session

ADA = Operator("ada", "test-host", "test")


def long_job(store: StateStore, job_id: str, checkpoints: int, *, effects: int = 0) -> None:
    """A RUNNING job that checkpointed `checkpoints` times and recorded `effects` operation keys."""
    store.register(NewJob(job_id, "exports", "export", {"args": [], "kwargs": {}, "options": {}}))
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    for n in range(checkpoints):
        store.save_checkpoint(job_id, claim.lease_id, {"row": n}, lease_ttl=60)
    for n in range(effects):
        store.record_effect(job_id, claim.lease_id, f"row-{n}", attempt_id=claim.attempt_id)


def test_runs_fold_repeats_and_keep_commands_and_errors_alone() -> None:
    events: list[dict[str, Any]] = [{"event": "checkpoint"}] * 4 + [
        {"event": "pause_requested", "operator": "ada"}, {"event": "checkpoint"},
        {"event": "retry_scheduled", "error_type": "E"}, {"event": "retry_scheduled", "error_type": "E"},
        {"event": "claim"}, {"event": "claim"}]
    found = [(run.event, run.count, run.folded) for run in runs(events)]
    assert found == [("checkpoint", 4, True), ("pause_requested", 1, False), ("checkpoint", 1, False),
                     ("retry_scheduled", 1, False), ("retry_scheduled", 1, False), ("claim", 2, False)]
    many = runs([{"event": "checkpoint", "n": n} for n in range(FOLD_SHOWN * 3)])
    assert len(many) == 1 and many[0].count == FOLD_SHOWN * 3 and len(many[0].shown) == FOLD_SHOWN


def test_effects_group_by_attempt_and_details_read_as_fields() -> None:
    effects = [{"attempt_id": "a1", "duplicates": 0}] * 3 + [{"attempt_id": "a2", "duplicates": 2}]
    assert [(g.attempt_id, g.count, g.folded, g.replays) for g in group_effects(effects)] == [
        ("a1", 3, True, 0), ("a2", 1, False, 2)]
    assert detail_fields({"b": [1, "x"], "a": "plain", "c": {"k": True}, "d": 2.5}) == [
        ("a", "plain"), ("b", '[1, "x"]'), ("c", '{"k": true}'), ("d", "2.5")]
    assert detail_fields(None) == [] and detail_fields({}) == []


def test_a_long_jobs_page_folds_its_runs_and_says_who_did_the_last_command(store: StateStore,
                                                                         tokens: Tokens) -> None:
    long_job(store, "long-1", 13, effects=5)
    Control(store, identity=ADA).cancel("long-1", reason="customer withdrew the export")
    client, _ = session(store, tokens.admin)
    page = client.get("/jobs/long-1").text
    assert re.search(r'<tbody class="fold" data-fold="checkpoint">.*?<code>checkpoint</code> x13', page, re.S)
    assert page.count('<tr class="ev-checkpoint">') == 13  # behind the one folded row
    assert '<details class="fold" data-fold="effects"><summary><strong>5 operation keys</strong>' in page
    last = re.search(r'<p id="last-command" class="meta">(.*?)</p>', page, re.S)
    assert last is not None and "cancel requested" in last.group(1) and "<strong>ada</strong>" in last.group(1)
    assert "customer withdrew the export" in last.group(1)
    # the cancel's detail as fields, not JSON
    assert '{&#34;' not in page and '<code class="detail">' not in page


def test_a_succeeded_jobs_earlier_error_is_history_not_an_error(store: StateStore, tokens: Tokens) -> None:
    store.register(NewJob("flaky-1", "exports", "export", {"args": [], "kwargs": {}, "options": {}}))
    claim = store.claim("flaky-1", worker_id="w1", lease_ttl=60)
    store.finish("flaky-1", claim.lease_id, Event.RETRY, worker_id="w1",
                 error=ErrorInfo("transient", "TimeoutError", "slow upstream"), retry_delay=0)
    client, _ = session(store, tokens.admin)
    waiting = client.get("/jobs/flaky-1").text
    assert '<dt>Last error</dt><dd class="err" id="last-error">' in waiting  # RETRY_WAIT: the error is current
    claim = store.claim("flaky-1", worker_id="w1", lease_ttl=60)
    store.finish("flaky-1", claim.lease_id, Event.SUCCEED, worker_id="w1")
    assert store.get("flaky-1").status is JobStatus.SUCCEEDED
    page = client.get("/jobs/flaky-1").text
    assert '<dt>Last error</dt>' not in page and '<dt>Earlier error</dt><dd class="history" id="last-error">' in page
    assert "TimeoutError: slow upstream" in page and "it is SUCCEEDED now" in page
    listing = client.get("/jobs?state=SUCCEEDED").text
    assert '<td class="history"><span class="meta">earlier:</span>' in listing and '<td class="err">' not in listing


def test_the_api_says_the_last_command_and_pages_the_history(store: StateStore, tokens: Tokens) -> None:
    long_job(store, "long-2", 30)
    client, _ = session(store, tokens.admin)
    fresh = client.get("/api/v1/jobs/long-2", headers=bearer(tokens.admin)).json()
    assert fresh["last_command"] is None and fresh["older_events"] is None  # 31 events, one page
    Control(store, identity=ADA).pause("long-2", reason="downstream maintenance")
    first = client.get("/api/v1/jobs/long-2?event_limit=10", headers=bearer(tokens.admin)).json()
    assert first["last_command"]["operator"] == "ada" and first["last_command"]["reason"] == "downstream maintenance"
    assert first["last_command"]["event"] == "pause_requested" and first["last_command"]["at"] > 0
    ids = [e["id"] for e in first["events"]]
    assert len(ids) == 10 and first["older_events"] == ids[0]
    seen = list(ids)
    before = first["older_events"]
    while before is not None:
        page = client.get(f"/api/v1/jobs/long-2?event_limit=10&before={before}", headers=bearer(tokens.admin)).json()
        seen = [e["id"] for e in page["events"]] + seen
        before = page["older_events"]
    assert seen == [e.id for e in store.events("long-2")]  # every event once, oldest first
    history = client.get(f"/api/v1/jobs/long-2/events?limit=5&before={ids[0]}", headers=bearer(tokens.admin))
    assert [e["id"] for e in history.json()["events"]] == seen[-15:-10]
    bad = client.get("/api/v1/jobs/long-2?before=zero", headers=bearer(tokens.admin))
    assert bad.status_code == 400 and "'before'" in bad.json()["error"]["message"]
    console = client.get(f"/jobs/long-2?before={ids[0]}").text
    assert 'id="newest-events"' in console and 'id="older-events"' not in console  # 22 older: one page


@pytest.mark.slow  # 10,000 event rows written and read: up to 6 s on PostgreSQL
def test_ten_thousand_checkpoints_fold_into_one_bounded_page(store: StateStore, tokens: Tokens) -> None:
    long_job(store, "long-3", 1)
    first = store.events("long-3", events=["checkpoint"])[-1]
    row = {c.name: getattr(first, c.name, None) for c in job_events.columns if c.name != "id"}
    row["checkpoint"] = '{"row": 0}'
    row["detail"] = None
    with store.write() as conn:  # the other 9,999 saves, written at once
        conn.execute(job_events.insert(), [{**row, "at": first.at + n / 1000} for n in range(1, 10_000)])
    client, _ = session(store, tokens.admin)
    response = client.get("/jobs/long-3")
    assert response.status_code == 200
    page = response.text
    assert '<code>checkpoint</code> x200' in page and page.count('<tr class="ev-checkpoint">') == FOLD_SHOWN
    assert len(page.encode()) < 120_000, len(page.encode())  # the 200 newest, FOLD_SHOWN of them drawn
    assert 'id="older-events"' in page


def test_every_state_badge_of_every_page_has_its_states_tone(store: StateStore, tokens: Tokens) -> None:
    for n, event in enumerate((Event.SUCCEED, Event.FAIL, Event.DEAD_LETTER, Event.NEED_REVIEW)):
        store.register(NewJob(f"tone-{n}", "exports", "export", {"args": [], "kwargs": {}, "options": {}}))
        claim = store.claim(f"tone-{n}", worker_id="w1", lease_ttl=60)
        store.finish(f"tone-{n}", claim.lease_id, event, worker_id="w1",
                     error=None if event is Event.SUCCEED else ErrorInfo("permanent", "E", "x"))
    client, csrf = session(store, tokens.admin)
    bulk = client.post("/bulk", data={"csrf_token": csrf, "view": "dlq", "command": "requeue", "scope": "filter",
                                      "reason": "r"})
    badges = 0
    badge = re.compile(r'<span class="state ([^"]*)" data-state="([^"]*)">([^<]*)</span>')
    for path in ("/", "/overview/live", "/jobs", "/dlq", "/review", "/workflows",
                 *(f"/jobs/tone-{n}" for n in range(4)), str(bulk.url)):
        page = client.get(path).text
        for classes, state, text in badge.findall(page):
            assert classes.split()[0] == f"tone-{tone(state)}" and text == state, (path, classes, state)
            badges += 1
        assert not re.search(r'class="state state-|class="tag">(?:[A-Z_]+)<', page), path
    assert badges > 20
