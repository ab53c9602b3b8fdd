"""The overview's figures are computed at most once per `overview_ttl` per app (every tab polls them)."""

from __future__ import annotations

from starlette.testclient import TestClient

from reliable.access import ApiTokens
from reliable.store import NewJob, StateStore
from reliable.web import WebConfig, create_app

from web_support import bearer


def pending(client: TestClient, token: str) -> int:
    return int(client.get("/api/v1/overview", headers=bearer(token)).json()["by_state"].get("PENDING", 0))


def test_the_overview_is_reused_within_its_ttl_and_fresh_without_one(store: StateStore) -> None:
    _, token = ApiTokens(store).create("ada", "admin")
    cached = TestClient(create_app(store, config=WebConfig(secret_key="s", overview_ttl=3600)))
    fresh = TestClient(create_app(store, config=WebConfig(secret_key="s", overview_ttl=0)))
    store.register(NewJob("j1", "q", "a", {"args": []}))
    assert pending(cached, token) == pending(fresh, token) == 1
    store.register(NewJob("j2", "q", "a", {"args": []}))
    assert pending(cached, token) == 1  # the same figures, within the hour
    assert pending(fresh, token) == 2
