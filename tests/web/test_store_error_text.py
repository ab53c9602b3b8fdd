"""A store error's text names the database (its URL: user, host, database or file): no client sees
it, on the console's pages and flashes as on the API, nor in a bulk operation's record. A misconfigured
store (StoreMisconfigured, StoreNotMigrated: also ConfigErrors) is the server's fault: a 503, never a
400 about the request, and never a reason to end a console session."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from reliable.access import ApiTokens
from reliable.errors import StoreUnavailable
from reliable.operations import Operations
from reliable.store import NewJob, StateStore

from web_support import session

PLACE = "secret-place"  # in the store's file name: must never reach a client
JOB = "job-1"


def broken_after_sign_in(tmp_path: Path) -> tuple[StateStore, TestClient, str]:
    """A console session over a store whose jobs table then goes missing (every job read is a
    StoreNotMigrated, a StoreMisconfigured and so a ConfigError)."""
    store = StateStore(f"sqlite:///{tmp_path / f'{PLACE}.db'}")
    store.upgrade()
    store.register(NewJob(JOB, "billing", "charge", {"args": [], "kwargs": {}, "options": {}}))
    client, csrf = session(store, ApiTokens(store).create("ada", "admin")[1])
    rename(store, "reliable_jobs", "reliable_jobs_gone")
    return store, client, csrf


def rename(store: StateStore, table: str, to: str) -> None:
    with store.engine.begin() as conn:
        conn.exec_driver_sql(f"ALTER TABLE {table} RENAME TO {to}")


def test_the_console_shows_a_store_error_as_a_503_without_the_store_url(tmp_path: Path) -> None:
    store, client, csrf = broken_after_sign_in(tmp_path)
    try:
        listing = client.get("/jobs")
        assert listing.status_code == 503, listing.text
        assert PLACE not in listing.text and "StoreNotMigrated" in listing.text
        acted = client.post(f"/jobs/{JOB}/actions/pause", data={"reason": "r", "csrf_token": csrf},
                            follow_redirects=False)
        assert acted.status_code == 503 and PLACE not in acted.text
        bulk = client.post("/bulk", data={"command": "pause", "reason": "r", "queue": "billing",
                                          "csrf_token": csrf}, follow_redirects=False)
        assert bulk.status_code == 503 and PLACE not in bulk.text
        # The session's token cannot be read either: still a 503, and the session is kept for later.
        rename(store, "reliable_api_tokens", "reliable_api_tokens_gone")
        assert client.get("/jobs", follow_redirects=False).status_code == 503
        rename(store, "reliable_api_tokens_gone", "reliable_api_tokens")
        rename(store, "reliable_jobs_gone", "reliable_jobs")
        back = client.get("/jobs", follow_redirects=False)
        assert back.status_code == 200 and JOB in back.text
    finally:
        store.close()


def test_a_bulk_operations_record_keeps_a_store_errors_text_out() -> None:
    def pause(job_id: str, **_: object) -> object:
        raise StoreUnavailable(f"cannot use the store at postgresql+psycopg://app@db.{PLACE}:5432/prod: refused")

    entry = Operations._one(pause, JOB, "r", {})
    assert entry["outcome"] == "error" and entry["error"] == "StoreUnavailable"
    assert PLACE not in entry["message"] and "StoreUnavailable" in entry["message"]
