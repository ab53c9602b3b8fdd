"""The console's alerts (issue 28, item 5): /alerts lists the evaluator's alerts, each runbook link carries
the alert's labels, and /alerts/{name} renders that alert's runbook as HTML with its own jobs.

Measured on main: three ReliableDeadLetterGrowth alerts (three actors) all linked the same runbook URL,
which rendered the first actor's jobs, as raw Markdown with HTML entities, naming port 9464.
"""

from __future__ import annotations

import re

from starlette.testclient import TestClient

from reliable import defaults
from reliable.alerts import AlertEngine, load_rules
from reliable.alerts.runbooks import RunbookRenderer
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.web import WebConfig, create_app

from web_support import Tokens, session

ACTORS = ("send", "bounce", "digest")
SECRET = "hunter2-zz"


def _dead(store: StateStore, actor: str) -> None:
    job_id = f"dead-{actor}"
    store.register(NewJob(job_id=job_id, queue="mail", actor=actor, message={}, owner="team-mail"))
    claim = store.claim(job_id, worker_id="w", lease_ttl=60)
    store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w",
                 error=ErrorInfo("permanent", "ValueError", f"can't <b>reach</b> password={SECRET}"))


def _firing(store: StateStore) -> None:
    for actor in ACTORS:
        _dead(store, actor)
    rules = [r for r in load_rules(defaults.path("alert_rules")) if r.name == "ReliableDeadLetterGrowth"]
    evaluation = AlertEngine(store, rules, RunbookRenderer(defaults.path("runbooks"))).evaluate()
    assert sorted(s.labels["actor"] for s in evaluation.firing) == sorted(ACTORS)


def test_each_alert_links_its_own_runbook_rendered_as_html(store: StateStore, tokens: Tokens) -> None:
    _firing(store)
    client, _ = session(store, tokens.viewer)
    with client:
        listing = client.get("/alerts")
        assert listing.status_code == 200
        links = re.findall(r'<a href="([^"]+)">Runbook<span class="sr"> of ReliableDeadLetterGrowth for (\w+)',
                           listing.text)
        assert sorted(actor for _, actor in links) == sorted(ACTORS)
        assert len({href for href, _ in links}) == 3  # one link per alert
        for href, actor in links:
            assert href == f"http://testserver/alerts/reliabledeadlettergrowth?queue=mail&amp;actor={actor}"
            page = client.get(href.replace("&amp;", "&"))
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            text = page.text
            assert f"<code>dead-{actor}</code>" in text, text  # this alert's job ...
            assert all(f"dead-{other}" not in text for other in ACTORS if other != actor)  # ... no other's
            assert "<h2>ReliableDeadLetterGrowth (warning, route notify, owner team-mail)</h2>" in text
            assert "<h3>Meaning</h3>" in text and "<li>" in text
            # The error text is data: escaped once (no tag, no entity shown as text), its secret masked.
            assert "can&#39;t &lt;b&gt;reach&lt;/b&gt;" in text and "&amp;#39;" not in text
            assert "<b>reach" not in text and SECRET not in text
            # The footer's link is the console's own address, not the exporter's default port.
            footer = f'Runbook: <a href="http://testserver/alerts/reliabledeadlettergrowth?queue=mail&amp;actor={actor}"'
            assert footer in text and ":9464" not in text
        quiet = client.get("/alerts/reliabledeadlettergrowth?actor=nobody")
        assert quiet.status_code == 200 and "is not firing here now" in quiet.text and "dead-send" not in quiet.text
        assert client.get("/alerts/nosuchalert").status_code == 404


def test_alerts_pages_need_a_sign_in_and_say_when_there_is_none(store: StateStore, tokens: Tokens) -> None:
    with TestClient(create_app(store, config=WebConfig(secret_key="s"))) as anonymous:
        for path in ("/alerts", "/alerts/reliabledeadlettergrowth"):
            assert anonymous.get(path, follow_redirects=False).status_code == 303
    client, _ = session(store, tokens.viewer)
    with client:
        page = client.get("/alerts")
    assert page.status_code == 200 and "No alert on record" in page.text
