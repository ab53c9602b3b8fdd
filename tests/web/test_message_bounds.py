"""Responses are bounded by what one job carries (issue 30 item 6), on both databases: listings
(API and console) carry no message bodies; a job's detail carries its message up to
MAX_SHOWN_MESSAGE_BYTES and otherwise says how large it is, the whole message a download away
(GET /api/v1/jobs/{id}/message, the console's /jobs/{id}/message), masked for the caller.
The registration limit itself (MAX_MESSAGE_BYTES) is tests/middleware/test_input_rules.py's."""

from __future__ import annotations

from starlette.testclient import TestClient

from reliable.inputs import MAX_MESSAGE_BYTES
from reliable.redact import MASK
from reliable.store import NewJob, StateStore
from reliable.web.queries import MAX_SHOWN_MESSAGE_BYTES

from web_support import Tokens, bearer, session

BIG = "x" * (MAX_MESSAGE_BYTES - 4096)  # the largest a job may carry, about


def make(store: StateStore) -> None:
    store.register(NewJob("big", "billing", "charge",
                          {"args": [BIG], "kwargs": {"password": "hunter2"}, "options": {}}))
    store.register(NewJob("small", "billing", "charge", {"args": [1], "kwargs": {}, "options": {}}))


def test_listings_carry_no_message_bodies(store: StateStore, tokens: Tokens, client: TestClient) -> None:
    make(store)
    for path in ("/api/v1/jobs", "/api/v1/jobs?queue=billing"):
        listing = client.get(path, headers=bearer(tokens.viewer))
        assert listing.status_code == 200 and len(listing.content) < 10_000
        assert {job["job_id"] for job in listing.json()["jobs"]} == {"big", "small"}
        assert all("message" not in job for job in listing.json()["jobs"])
    console, _ = session(store, tokens.viewer)
    page = console.get("/jobs")
    assert page.status_code == 200 and len(page.content) < 100_000


def test_a_detail_cuts_a_large_message_and_the_whole_is_a_download_away(
        store: StateStore, tokens: Tokens, client: TestClient) -> None:
    make(store)
    detail = client.get("/api/v1/jobs/big", headers=bearer(tokens.viewer))
    assert detail.status_code == 200 and len(detail.content) < 20_000
    job = detail.json()["job"]
    assert job["message"] is None and job["message_cut"]["limit"] == MAX_SHOWN_MESSAGE_BYTES
    assert job["message_cut"]["bytes"] > MAX_SHOWN_MESSAGE_BYTES
    small = client.get("/api/v1/jobs/small", headers=bearer(tokens.viewer)).json()["job"]
    assert small["message"]["args"] == [1] and small["message_cut"] is None
    whole = client.get("/api/v1/jobs/big/message", headers=bearer(tokens.viewer)).json()
    assert whole["message"]["args"] == [BIG] and whole["message"]["kwargs"] == {"password": MASK}
    admin = client.get("/api/v1/jobs/big/message", headers=bearer(tokens.admin)).json()
    assert admin["message"]["kwargs"] == {"password": "hunter2"}
    console, _ = session(store, tokens.viewer)
    page = console.get("/jobs/big")
    assert page.status_code == 200 and len(page.content) < 100_000 and "/jobs/big/message" in page.text
    download = console.get("/jobs/big/message")
    assert download.json()["args"] == [BIG] and download.json()["kwargs"] == {"password": MASK}
    assert "attachment" in download.headers["content-disposition"]
