"""`reliable tokens`: create (printed once), list (never a secret), revoke (at once, recorded)."""

from __future__ import annotations

import json

from click.testing import CliRunner, Result

from reliable.access import ApiTokens
from reliable.cli.main import cli
from reliable.store import StateStore


def run(*args: str) -> Result:
    """`reliable ARGS` in-process, as an operator named carol."""
    return CliRunner().invoke(cli, list(args), env={"RELIABLE_STORE": None, "RELIABLE_OPERATOR": "carol"})


def test_create_prints_the_token_once_and_it_authenticates(store: StateStore, store_url: str) -> None:
    created = run("tokens", "create", "oncall-bot", "--role", "operator", "--queue", "billing", "--queue",
                  "exports-*", "--expires", "90d", "--store", store_url)
    assert created.exit_code == 0, created.output
    token = created.stdout.strip()
    assert token.startswith("rel_") and "shown only now" in created.stderr
    record = ApiTokens(store).authenticate(token)
    assert record is not None and record.name == "oncall-bot" and record.queues == ("billing", "exports-*")
    assert record.created_by == "carol" and record.expires_at is not None
    assert record.expires_at - record.created_at == 90 * 86_400
    listed = run("tokens", "list", "--json", "--store", store_url)
    assert listed.exit_code == 0, listed.output
    assert token.split("_", 2)[2] not in listed.stdout
    [row] = json.loads(listed.stdout)
    assert row["name"] == "oncall-bot" and row["role"] == "operator" and row["last_used_at"] is not None


def test_revoke_takes_effect_at_once_and_is_kept_for_the_record(store: StateStore, store_url: str) -> None:
    record, token = ApiTokens(store).create("laptop", "admin")
    refused = run("tokens", "revoke", record.token_id, "--store", store_url)
    assert refused.exit_code == 2 and "--reason" in refused.output
    revoked = run("tokens", "revoke", record.token_id, "--reason", "laptop lost", "--store", store_url)
    assert revoked.exit_code == 0, revoked.output
    assert ApiTokens(store).authenticate(token) is None
    assert run("tokens", "list", "--json", "--store", store_url).stdout.strip() == "[]"
    [row] = json.loads(run("tokens", "list", "--all", "--json", "--store", store_url).stdout)
    assert row["revoked_by"] == "carol: laptop lost" and row["revoked_at"] is not None
    again = run("tokens", "revoke", record.token_id, "--reason", "again", "--store", store_url)
    assert again.exit_code != 0 and "revoked already" in again.output


def test_bad_requests_name_what_is_wrong(store: StateStore, store_url: str) -> None:
    bad_role = run("tokens", "create", "x", "--role", "root", "--store", store_url)
    assert bad_role.exit_code == 2 and "root" in bad_role.output
    scoped_viewer = run("tokens", "create", "x", "--role", "viewer", "--queue", "billing", "--store", store_url)
    assert scoped_viewer.exit_code != 0 and "scope an operator token" in scoped_viewer.output
    unknown = run("tokens", "revoke", "nope", "--reason", "r", "--store", store_url)
    assert unknown.exit_code != 0 and "no API token 'nope'" in unknown.output
    assert ApiTokens(store).list(include_inactive=True) == []
