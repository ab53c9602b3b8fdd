"""Authentication: tokens (hashed, revocable, expiring), browser sessions with CSRF, a trusted proxy header."""

from __future__ import annotations

import re

import pytest
from starlette.testclient import TestClient

from reliable.access import ApiTokens, role_policy
from reliable.errors import ConfigError
from reliable.operators import OperatorsPolicy
from reliable.store import StateStore
from reliable.store.schema import api_tokens
from reliable.web import WebConfig, create_app

from web_support import Tokens, bearer


def test_no_token_is_401(client: TestClient) -> None:
    response = client.get("/api/v1/whoami")
    assert response.status_code == 401
    assert "sign in" in response.json()["error"]["message"]


def test_a_token_names_its_principal(client: TestClient, tokens: Tokens) -> None:
    body = client.get("/api/v1/whoami", headers=bearer(tokens.operator)).json()
    assert body["name"] == "otto" and body["role"] == "operator" and body["queues"] == ["billing"]
    assert body["source"] == "token" and body["may_act"] is True
    assert client.get("/api/v1/whoami", headers=bearer(tokens.viewer)).json()["may_act"] is False


def test_wrong_secret_malformed_and_other_schemes_are_401(client: TestClient, tokens: Tokens) -> None:
    token_id = tokens.admin.split("_")[1]
    for header in (f"Bearer rel_{token_id}_wrongsecret", "Bearer nonsense", f"Basic {tokens.admin}", "Bearer "):
        assert client.get("/api/v1/whoami", headers={"Authorization": header}).status_code == 401, header


def test_only_a_hash_of_the_secret_is_stored(store: StateStore, tokens: Tokens) -> None:
    with store.read() as conn:
        stored = " ".join(str(v) for row in conn.execute(api_tokens.select()).all() for v in row)
    for token in (tokens.viewer, tokens.operator, tokens.admin):
        assert token.split("_", 2)[2] not in stored


def test_revoked_and_expired_tokens_are_refused_at_once(client: TestClient, store: StateStore) -> None:
    record, token = ApiTokens(store).create("tmp", "admin")
    assert client.get("/api/v1/whoami", headers=bearer(token)).status_code == 200
    ApiTokens(store).revoke(record.token_id, by="test")
    assert client.get("/api/v1/whoami", headers=bearer(token)).status_code == 401
    with pytest.raises(ConfigError, match="revoked already"):
        ApiTokens(store).revoke(record.token_id)
    record, token = ApiTokens(store).create("short", "viewer", expires_in=30)
    with store.write() as conn:
        conn.execute(api_tokens.update().where(api_tokens.c.token_id == record.token_id)
                     .values(expires_at=store.now() - 1))
    assert client.get("/api/v1/whoami", headers=bearer(token)).status_code == 401


def test_bad_token_requests_are_refused_with_a_clear_error(store: StateStore) -> None:
    with pytest.raises(ConfigError, match="unknown role 'root'"):
        ApiTokens(store).create("x", "root")
    with pytest.raises(ConfigError, match="scope an operator token"):
        ApiTokens(store).create("x", "viewer", queues=["billing"])
    with pytest.raises(ConfigError, match="needs a name"):
        ApiTokens(store).create(" ", "viewer")


def test_role_policies_grant_what_the_role_says() -> None:
    operator = role_policy("otto", "operator", queues=["billing"], owners=["team-a*"])
    assert operator.allows("otto", "cancel", "billing", "team-a1")
    assert not operator.allows("otto", "cancel", "exports", "team-a1")
    assert not operator.allows("otto", "cancel", "billing", "team-b")
    assert not operator.allows("otto", "cancel", "billing", None)  # a scoped owner rule needs an owner
    assert not role_policy("vera", "viewer").may_act("vera")
    assert role_policy("ada", "admin").allows("ada", "discard", "anything", None)


def _session_client(store: StateStore, token: str) -> tuple[TestClient, str]:
    client = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    page = client.get("/login")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert csrf is not None
    response = client.post("/login", data={"token": token, "csrf_token": csrf.group(1)}, follow_redirects=False)
    assert response.status_code == 303
    # Signing in starts a new session with a new CSRF token (pages carry it in a meta tag).
    fresh = re.search(r'<meta name="csrf-token" content="([^"]+)"', client.get("/").text)
    assert fresh is not None and fresh.group(1) != csrf.group(1)
    return client, fresh.group(1)


def test_a_session_signs_in_with_a_token_and_needs_csrf_to_act(store: StateStore, tokens: Tokens) -> None:
    client, csrf = _session_client(store, tokens.admin)
    assert client.get("/api/v1/whoami").json()["source"] == "session"
    assert client.post("/logout", follow_redirects=False).status_code == 403  # no CSRF token
    assert client.post("/logout", headers={"X-CSRF-Token": "forged"}, follow_redirects=False).status_code == 403
    assert client.post("/logout", headers={"X-CSRF-Token": csrf}, follow_redirects=False).status_code == 303
    assert client.get("/api/v1/whoami").status_code == 401


def test_a_session_ends_when_its_token_is_revoked(store: StateStore) -> None:
    record, token = ApiTokens(store).create("eve", "operator")
    client, _ = _session_client(store, token)
    assert client.get("/api/v1/whoami").status_code == 200
    ApiTokens(store).revoke(record.token_id)
    assert client.get("/api/v1/whoami").status_code == 401


def test_a_wrong_token_does_not_sign_in(store: StateStore, tokens: Tokens) -> None:
    client = TestClient(create_app(store, config=WebConfig(secret_key="s")))
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text)
    assert csrf is not None
    response = client.post("/login", data={"token": "rel_nope_nope", "csrf_token": csrf.group(1)})
    assert response.status_code == 401 and "unknown, revoked or expired" in response.text
    assert client.get("/api/v1/whoami").status_code == 401
    # A sign-in without the form's CSRF token is refused (login CSRF), even with a valid token.
    assert client.post("/login", data={"token": tokens.admin}).status_code == 403
    assert client.get("/api/v1/whoami").status_code == 401


def test_console_pages_redirect_to_sign_in(client: TestClient) -> None:
    response = client.get("/", follow_redirects=False)
    assert response.status_code == 303 and "/login?next=/" in response.headers["location"]


def test_a_proxy_header_is_trusted_only_from_trusted_addresses(store: StateStore) -> None:
    operators = OperatorsPolicy.parse("operators:\n  alice: [admin]\nroles:\n  admin:\n    - {commands: ['*']}\n")
    app = create_app(store, config=WebConfig(secret_key="s", proxy_header="X-Forwarded-User",
                                             trusted_proxies=("testclient",), proxy_operators=operators))
    client = TestClient(app)
    body = client.get("/api/v1/whoami", headers={"X-Forwarded-User": "alice"}).json()
    assert body["name"] == "alice" and body["source"] == "proxy" and body["may_act"]
    assert client.get("/api/v1/whoami", headers={"X-Forwarded-User": "mallory"}).status_code == 403
    untrusted = TestClient(create_app(store, config=WebConfig(secret_key="s", proxy_header="X-Forwarded-User",
                                                              trusted_proxies=("10.9.9.9",),
                                                              proxy_operators=operators)))
    assert untrusted.get("/api/v1/whoami", headers={"X-Forwarded-User": "alice"}).status_code == 401
    # A proxy that appends the header instead of replacing it would let the client name itself.
    twice = client.get("/api/v1/whoami", headers=[("X-Forwarded-User", "mallory"), ("X-Forwarded-User", "alice")])
    assert twice.status_code == 401 and "given 2 times" in twice.json()["error"]["message"]


def test_a_proxy_header_needs_trusted_addresses_and_an_operators_policy() -> None:
    operators = OperatorsPolicy.parse("operators:\n  alice: [admin]\nroles:\n  admin:\n    - {commands: ['*']}\n")
    with pytest.raises(ConfigError, match="needs trusted_proxies"):
        WebConfig(secret_key="s", proxy_header="X-Forwarded-User", proxy_operators=operators)
    with pytest.raises(ConfigError, match="needs proxy_operators"):
        WebConfig(secret_key="s", proxy_header="X-Forwarded-User", trusted_proxies=("127.0.0.1",))


def test_powers_come_from_what_a_role_allows_not_from_its_name(store: StateStore) -> None:
    operators = OperatorsPolicy.parse(
        "operators:\n  carol: [admin]\n  dave: [root]\nroles:\n  admin:\n    - {commands: [pause], queues: [sandbox]}\n"
        "  root:\n    - {commands: ['*']}\n")
    app = create_app(store, config=WebConfig(secret_key="s", proxy_header="X-Forwarded-User",
                                             trusted_proxies=("testclient",), proxy_operators=operators))
    client = TestClient(app)
    carol = client.get("/api/v1/whoami", headers={"X-Forwarded-User": "carol"}).json()
    dave = client.get("/api/v1/whoami", headers={"X-Forwarded-User": "dave"}).json()
    assert carol["may_act"] and not carol["unrestricted"]  # a role named admin that may only pause a sandbox
    assert dave["unrestricted"]


def test_two_active_tokens_may_not_share_a_name(store: StateStore) -> None:
    record, _ = ApiTokens(store).create("ci-bot", "operator")
    with pytest.raises(ConfigError, match="an active API token named 'ci-bot' exists"):
        ApiTokens(store).create("ci-bot", "admin")
    ApiTokens(store).revoke(record.token_id)
    assert ApiTokens(store).create("ci-bot", "admin")[0].role == "admin"  # after a revocation, again
