"""Helpers of the API and console tests."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from starlette.testclient import TestClient

from reliable.store import StateStore
from reliable.web import WebConfig, create_app

__all__ = ["Tokens", "bearer", "csrf_of", "session"]


@dataclass
class Tokens:
    """One token per role (the operator's is scoped to queue 'billing')."""

    viewer: str
    operator: str
    admin: str


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of `token`."""
    return {"Authorization": f"Bearer {token}"}


def session(store: StateStore, token: str, config: WebConfig | None = None,
            **app_kwargs: Any) -> tuple[TestClient, str]:
    """A client signed in with `token` through the console's form, and its session's CSRF token."""
    client = TestClient(create_app(store, config=config or WebConfig(secret_key="s"), **app_kwargs))
    login = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
    assert login is not None
    assert client.post("/login", data={"token": token, "csrf_token": login.group(1)},
                       follow_redirects=False).status_code == 303
    return client, csrf_of(client.get("/").text)


def csrf_of(page: str) -> str:
    """The CSRF token a page carries."""
    found = re.search(r'<meta name="csrf-token" content="([^"]+)"', page)
    assert found is not None
    return found.group(1)
