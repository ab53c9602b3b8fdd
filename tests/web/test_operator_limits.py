"""Issue 42, item 3: an operator caps an actor's concurrency from the API and the queues page, on SQLite
and PostgreSQL: the cap is what workers' slots honour at once, the adaptive restore and a new
declaration stay under it, clearing it restores the declared one; bounds, roles, audit, pagination."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from reliable.limits import Limits, limit_spec
from reliable.limits.adaptive import AdaptiveSettings, after_quiet
from reliable.limits.storage import LimitStore
from reliable.store import NewJob, StateStore
from reliable.store.limit_settings import get_limit, list_events
from reliable.store.schema import limits as limits_table
from reliable.web import WebConfig, create_app

from web_support import Tokens, bearer, session

SPEC = limit_spec("charge", Limits(concurrency=3))


@pytest.fixture
def limited(store: StateStore) -> StateStore:
    """`charge` (queue billing) declared with concurrency 3; `sync` (queue other) with 2."""
    LimitStore(store).ensure(SPEC, "")
    LimitStore(store).ensure(limit_spec("sync", Limits(concurrency=2)), "")
    store.register(NewJob("c-1", "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    store.register(NewJob("s-1", "other", "sync", {"args": [], "kwargs": {}, "options": {}}))
    return store


def _slots(store: StateStore, n: int) -> int:
    limits = LimitStore(store, rand=lambda: 0.0)
    taken = [limits.acquire(SPEC, "", f"job-{i}", ttl=60).slot for i in range(n)]
    for slot, i in ((s, i) for i, s in enumerate(taken) if s is not None):
        limits.release(SPEC, "", slot, f"job-{i}")
    return sum(1 for s in taken if s is not None)


def _set(client: TestClient, token: str, actor: str, body: dict[str, Any]) -> Any:
    return client.post(f"/api/v1/limits/{actor}/concurrency", json=body, headers=bearer(token))


def test_a_cap_is_honoured_at_once_and_cleared(limited: StateStore, tokens: Tokens) -> None:
    assert _slots(limited, 5) == 3
    with TestClient(create_app(limited, config=WebConfig(secret_key="s"))) as client:
        capped = _set(client, tokens.admin, "charge", {"concurrency": 1, "reason": "the card API is struggling"})
        assert capped.status_code == 200, capped.text
        assert capped.json()["before"]["effective"] == 3 and capped.json()["after"] == {
            "actor": "charge", "declared": 3, "effective": 1, "ceiling": 1, "streak": 0,
            "changed_at": capped.json()["before"]["changed_at"]}
        assert _slots(limited, 5) == 1
        listed = client.get("/api/v1/limits", headers=bearer(tokens.viewer)).json()
        assert {r["actor"]: (r["effective"], r["ceiling"]) for r in listed["limits"]} == {"charge": (1, 1),
                                                                                         "sync": (2, None)}
        cleared = _set(client, tokens.admin, "charge", {"concurrency": None, "reason": "recovered"})
    assert cleared.json()["after"]["effective"] == 3 and cleared.json()["after"]["ceiling"] is None
    assert _slots(limited, 5) == 3
    assert [(e.event, e.operator, e.reason, e.detail["after"]) for e in list_events(limited, "charge")] == [
        ("concurrency_set", "ada", "the card API is struggling", 1), ("concurrency_cleared", "ada", "recovered", 3)]


def test_the_adaptive_restore_and_a_new_declaration_stay_under_the_cap(limited: StateStore, tokens: Tokens) -> None:
    with TestClient(create_app(limited, config=WebConfig(secret_key="s"))) as client:
        assert _set(client, tokens.admin, "charge", {"concurrency": 2, "reason": "r"}).status_code == 200
    with limited.write() as conn:  # a rate-limited halving happened meanwhile
        conn.execute(limits_table.update().where(limits_table.c.name == "charge").values(effective=1))
    settings = AdaptiveSettings(streak_to_reduce=3, quiet=1.0, step=5)
    LimitStore(limited).adapt("charge", lambda state, now: after_quiet(state, now + 3600, settings))
    assert (get_limit(limited, "charge") or pytest.fail("no row")).effective == 2  # not 3: the cap holds
    LimitStore(limited).ensure(limit_spec("charge", Limits(concurrency=5)), "")  # a deploy declares 5
    after = get_limit(limited, "charge") or pytest.fail("no row")
    assert (after.declared, after.effective, after.ceiling) == (5, 2, 2)


def test_bounds_roles_and_unknown_actors(limited: StateStore, tokens: Tokens) -> None:
    with TestClient(create_app(limited, config=WebConfig(secret_key="s"))) as client:
        for bad in (0, 4, "2", True, 1.5):
            answer = _set(client, tokens.admin, "charge", {"concurrency": bad, "reason": "r"})
            message = answer.json()["error"]["message"]
            assert answer.status_code == 400 and "'concurrency'" in message, (bad, answer.text)
        assert "from 1 to 3" in _set(client, tokens.admin, "charge", {"concurrency": 4, "reason": "r"}).text
        assert _set(client, tokens.admin, "charge", {"reason": "r"}).status_code == 400
        assert _set(client, tokens.admin, "charge", {"concurrency": 1}).status_code == 400  # no reason
        assert _set(client, tokens.admin, "nobody", {"concurrency": 1, "reason": "r"}).status_code == 404
        assert _set(client, tokens.viewer, "charge", {"concurrency": 1, "reason": "r"}).status_code == 403
        assert _set(client, tokens.operator, "sync", {"concurrency": 1, "reason": "r"}).status_code == 403
        assert _set(client, tokens.operator, "charge", {"concurrency": 2, "reason": "r"}).status_code == 200
        first = client.get("/api/v1/limits?limit=1", headers=bearer(tokens.viewer)).json()
        second = client.get(f"/api/v1/limits?limit=1&cursor={first['next_cursor']}", headers=bearer(tokens.viewer))
        assert [r["actor"] for r in first["limits"]] == ["charge"] and first["next_cursor"] == "charge"
        assert [r["actor"] for r in second.json()["limits"]] == ["sync"] and second.json()["next_cursor"] is None
        assert client.get("/api/v1/limits?limit=0", headers=bearer(tokens.viewer)).status_code == 400
    refused = [(e.event, e.operator) for e in list_events(limited, "sync")]
    assert refused == [("command_refused", "otto")]
    assert (get_limit(limited, "sync") or pytest.fail("no row")).ceiling is None


def test_the_queues_page_changes_a_limit(limited: StateStore, tokens: Tokens) -> None:
    client, csrf = session(limited, tokens.operator)
    with client:
        page = client.get("/queues").text
        section = page.split('id="limits"')[1]
        assert 'action="http://testserver/queues/limits/charge"' in section
        assert 'data-actor="sync"' in section and "/queues/limits/sync" not in section  # not its queue
        done = client.post("/queues/limits/charge", data={"concurrency": "1", "reason": "slow API",
                                                          "csrf_token": csrf})
        assert "charge: concurrency 1 of 3 declared." in done.text
        row = done.text.split('data-actor="charge"')[1].split("</tr>")[0]
        assert "Clear the cap" in row
        bad = client.post("/queues/limits/charge", data={"concurrency": "9", "reason": "x", "csrf_token": csrf})
        assert "concurrency of charge not changed: field &#39;concurrency&#39;: must be from 1 to 3" in bad.text
        client.post("/queues/limits/charge", data={"clear": "1", "reason": "ok again", "csrf_token": csrf})
    assert (get_limit(limited, "charge") or pytest.fail("no row")).ceiling is None


def test_a_cap_is_judged_on_the_actors_home_queues_not_on_a_lane_one_job_waits_on(
        limited: StateStore, tokens: Tokens) -> None:
    """A `refund` job waiting on a shared retry lane is still billing's: an operator of the lane alone
    may not cap refund (the rule of job commands, Job.home_queue)."""
    from reliable.options import OWN_QUEUE
    from reliable.web.auth import ApiTokens

    LimitStore(limited).ensure(limit_spec("refund", Limits(concurrency=2)), "")
    limited.register(NewJob("r-lane", "retries", "refund",
                            {"queue_name": "retries", "args": [], "kwargs": {}, "options": {OWN_QUEUE: "billing"}}))
    _, lane = ApiTokens(limited).create("lena", "operator", queues=["retries"])
    _, billing = ApiTokens(limited).create("bill", "operator", queues=["billing"])
    with TestClient(create_app(limited, config=WebConfig(secret_key="s"))) as client:
        refused = _set(client, lane, "refund", {"concurrency": 1, "reason": "lane operator"})
        assert refused.status_code == 403, refused.text
        capped = _set(client, billing, "refund", {"concurrency": 1, "reason": "billing operator"})
        assert capped.status_code == 200, capped.text
