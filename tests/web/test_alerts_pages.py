"""Issue 42, bad input: GET /api/v1/alerts and the console's Alerts page are paginated (limit + cursor, as
the other list routes), on SQLite and PostgreSQL: every alert on exactly one page, firing first, the
newest first in each state, with ties (the same start) broken by source and fingerprint; a cursor the
listing did not make and an out-of-range limit are a 400 naming the parameter."""

from __future__ import annotations

import base64

import pytest
from starlette.testclient import TestClient

from reliable.alerts.listing import page_alerts
from reliable.errors import ConfigError
from reliable.store import StateStore
from reliable.store.alert_rows import save_alert_rows
from reliable.web import WebConfig, create_app

from web_support import Tokens, bearer, session

#: 7 firing alerts (3 sharing one start), 4 pending, 3 resolved.
STATES = ["firing"] * 7 + ["pending"] * 4 + ["resolved"] * 3


def _seed(store: StateStore) -> None:
    rows = []
    for n, state in enumerate(STATES):
        start = 1000.0 if n < 3 else 1000.0 + n
        rows.append({"fingerprint": f"fp{n:02d}", "alertname": f"Alert{n:02d}", "labels": {"queue": f"q{n}"},
                     "annotations": {"summary": f"alert {n}"}, "state": state,
                     "pending_since": start if state == "pending" else None,
                     "starts_at": None if state == "pending" else start,
                     "ends_at": start + 5 if state == "resolved" else None, "send_attempts": 0})
    save_alert_rows(store, rows)


def _walk(client: TestClient, headers: dict[str, str], limit: int) -> list[list[dict[str, object]]]:
    pages, cursor = [], None
    while True:
        params = {"limit": str(limit), **({"cursor": cursor} if cursor else {})}
        answer = client.get("/api/v1/alerts", params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["total"] == len(STATES) and len(body["alerts"]) <= limit
        pages.append(body["alerts"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages


def test_the_api_pages_through_every_alert_once_firing_first(store: StateStore, tokens: Tokens) -> None:
    _seed(store)
    headers = bearer(tokens.viewer)
    with TestClient(create_app(store, config=WebConfig(secret_key="s"))) as client:
        whole = client.get("/api/v1/alerts", headers=headers).json()
        pages = _walk(client, headers, 3)
        firing = client.get("/api/v1/alerts", params={"state": "firing", "limit": "5"}, headers=headers).json()
        bad_cursor = client.get("/api/v1/alerts", params={"cursor": "not-one"}, headers=headers)
        tampered = [client.get("/api/v1/alerts", params={"cursor": _encoded(raw)}, headers=headers).status_code
                    for raw in ("[" * 5000 + "]" * 5000, '[0, ' + "9" * 400 + ', "s", "f"]')]
        bad_limit = client.get("/api/v1/alerts", params={"limit": "0"}, headers=headers)
        too_big = client.get("/api/v1/alerts", params={"limit": "1001"}, headers=headers)
    assert whole["next_cursor"] is None and len(whole["alerts"]) == len(STATES)  # 14 fit the default page
    assert [len(p) for p in pages] == [3, 3, 3, 3, 2]
    walked = [a["fingerprint"] for page in pages for a in page]
    assert walked == [a["fingerprint"] for a in whole["alerts"]] and len(set(walked)) == len(STATES)
    assert [a["state"] for page in pages for a in page] == ["firing"] * 7 + ["pending"] * 4 + ["resolved"] * 3
    assert walked[:7] == ["fp06", "fp05", "fp04", "fp03", "fp00", "fp01", "fp02"]  # newest first, ties by print
    assert len(firing["alerts"]) == 5 and firing["total"] == 7 and firing["next_cursor"]
    assert bad_cursor.status_code == 400 and "'cursor'" in bad_cursor.json()["error"]["message"]
    assert tampered == [400, 400]  # nested too deep for JSON, a start too large for a float
    assert bad_limit.status_code == 400 and "'limit'" in bad_limit.json()["error"]["message"]
    assert too_big.status_code == 400


def test_the_alerts_page_has_next_and_first_links(store: StateStore, tokens: Tokens) -> None:
    _seed(store)
    client, _ = session(store, tokens.viewer)
    with client:
        first = client.get("/alerts?limit=10")
        assert first.status_code == 200 and "(10 of 14)" in first.text
        assert first.text.count("<tr data-alert=") == 10 and 'rel="next"' in first.text
        next_url = first.text.split('rel="next"')[0].rsplit('<a href="', 1)[1].split('"')[0].replace("&amp;", "&")
        second = client.get(next_url)
        assert second.status_code == 200 and second.text.count("<tr data-alert=") == 4
        assert 'rel="next"' not in second.text and "First page" in second.text
        shown = {line.split('"')[1] for text in (first.text, second.text)
                 for line in text.split("<tr data-alert=")[1:]}
        assert len(shown) == len(STATES)
        bad = client.get("/alerts?cursor=xyz")
        assert bad.status_code == 400 and "cursor" in bad.text


def test_page_alerts_refuses_a_cursor_it_did_not_make() -> None:
    rows = [{"state": "firing", "starts_at": 1.0, "source": "store", "fingerprint": "a"}]
    assert page_alerts(rows, limit=1) == ([rows[0]], None)
    with pytest.raises(ConfigError, match="'cursor'"):
        page_alerts(rows, limit=1, cursor="eyJ4IjogMX0")  # valid base64 JSON, not a key


def _encoded(raw: str) -> str:
    """`raw` as a cursor is encoded (URL-safe base64, unpadded)."""
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")
