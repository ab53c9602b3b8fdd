"""Fixtures for the API and console tests: an app over a real store, and tokens of each role (web_support.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("starlette", reason="the web extra is not installed (pip install 'reliable[web]')")

from starlette.testclient import TestClient

from reliable.access import ApiTokens
from reliable.store import StateStore
from reliable.web import WebConfig, create_app

from web_support import Tokens


@pytest.fixture
def tokens(store: StateStore) -> Tokens:
    """Tokens of each role in `store`."""
    api_tokens = ApiTokens(store)
    return Tokens(viewer=api_tokens.create("vera", "viewer")[1],
                  operator=api_tokens.create("otto", "operator", queues=["billing"])[1],
                  admin=api_tokens.create("ada", "admin")[1])


@pytest.fixture
def client(store: StateStore) -> Iterator[TestClient]:
    """A test client of the app over `store` (both databases)."""
    with TestClient(create_app(store, config=WebConfig(secret_key="test-secret"))) as test_client:
        yield test_client
