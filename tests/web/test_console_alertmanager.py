"""The console lists every firing alert (issue 41, item 4): it reads Alertmanager, so an alert only
Prometheus raised is listed beside the store's, each with its source, in the page and in GET
/api/v1/alerts; the runbook of that PromQL alert lists the jobs its labels select, each id a link and
its safe action a button for those who may act; Alertmanager unreachable is said in a banner.

Measured on main: ReliableStaleCommits and ReliableDeadLetters firing in Alertmanager were not
listed, and their runbook said "is not firing here now" without job details.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reliable import defaults
from reliable.alerts import AlertEngine, load_rules
from reliable.alerts.runbooks import RunbookRenderer
from reliable.isotime import format_time
from reliable.states import Event
from reliable.store import NewJob, StateStore
from reliable.web import WebConfig

from monitoring import Alertmanager, require_monitoring
from support import free_port, wait_for
from web_support import Tokens, bearer, session

pytestmark = pytest.mark.integration
BURN = {"alertname": "ReliableErrorBudgetBurnFast", "actor": "charge", "owner": "team-payments",
        "severity": "critical", "route": "page"}


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Alertmanager]:
    require_monitoring()
    am = Alertmanager(tmp_path)
    am.start()
    yield am
    am.stop()


def _prometheus_raises(am: Alertmanager) -> None:
    """What Prometheus posts for a firing rule: labels, annotations, times and its generatorURL."""
    now = time.time()
    alert = {"labels": BURN, "annotations": {"summary": "charge burns its 99% SLO error budget fast"},
             "startsAt": format_time(now, ms=True), "endsAt": format_time(now + 300, ms=True),
             "generatorURL": "http://prometheus.example:9090/graph?g0.expr=reliable_transitions_total"}
    httpx.post(f"{am.url}/api/v2/alerts", json=[alert], timeout=5).raise_for_status()
    wait_for(lambda: am.alerts("ReliableErrorBudgetBurnFast"), "Alertmanager to hold the alert")


def _store_alert(store: StateStore) -> None:
    for job_id, actor, owner in (("charge-1", "charge", "team-payments"), ("mail-1", "send", "team-mail")):
        store.register(NewJob(job_id=job_id, queue=actor, actor=actor, message={}, owner=owner))
        claim = store.claim(job_id, worker_id="w", lease_ttl=60)
        store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w")
    rules = [r for r in load_rules(defaults.path("alert_rules")) if r.name == "ReliableDeadLetterGrowth"]
    AlertEngine(store, rules, RunbookRenderer(defaults.path("runbooks"))).evaluate()


@pytest.mark.slow
def test_console_lists_an_alert_only_prometheus_raised(store: StateStore, tokens: Tokens,
                                                        alertmanager: Alertmanager) -> None:
    _store_alert(store)
    _prometheus_raises(alertmanager)
    config = WebConfig(secret_key="s", alertmanagers=(alertmanager.url,))
    client, _ = session(store, tokens.admin, config=config)
    with client:
        page = client.get("/alerts").text
        rows = dict(re.findall(r'<tr data-alert="[^"]+">.*?<td>(Reliable\w+)</td>.*?data-source="(\w+)"', page,
                               re.S))
        assert rows == {"ReliableErrorBudgetBurnFast": "prometheus", "ReliableDeadLetterGrowth": "store"}, page
        assert "flash-error" not in page  # Alertmanager was read: no banner
        listed = client.get("/api/v1/alerts", headers=bearer(tokens.viewer)).json()
        assert {(a["alertname"], a["source"], a["state"]) for a in listed["alerts"]} == {
            ("ReliableErrorBudgetBurnFast", "prometheus", "firing"), ("ReliableDeadLetterGrowth", "store", "firing")}
        assert listed["alertmanager"] == {"urls": [alertmanager.url], "read": True, "error": None}
        burn = next(a for a in listed["alerts"] if a["source"] == "prometheus")
        assert burn["labels"] == BURN and burn["starts_at"] is not None

        # Its runbook: the jobs its labels select (actor charge, owner team-payments), not "not firing here".
        runbook = client.get("/alerts/reliableerrorbudgetburnfast", params={"actor": "charge"}).text
        assert "not firing here" not in runbook and "charge burns its 99% SLO error budget fast" in runbook
        assert '<a href="http://testserver/jobs/charge-1"><code>charge-1</code></a>' in runbook  # the id links
        assert "mail-1" not in runbook  # another team's job
        form = re.search(r'<form class="inline" method="post" action="([^"]+)">.*?</form>', runbook, re.S)
        assert form is not None and form.group(1) == "http://testserver/jobs/charge-1/actions/requeue", runbook
        assert "<code>reliable dlq requeue charge-1 --reason alert:ReliableErrorBudgetBurnFast</code>" in runbook

    viewer, _ = session(store, tokens.viewer, config=config)
    with viewer:
        runbook = viewer.get("/alerts/reliableerrorbudgetburnfast", params={"actor": "charge"}).text
        assert "actions/requeue" not in runbook and "requeue (your role may not act)" in runbook


def test_alertmanager_unreachable_is_a_banner_never_all_quiet(store: StateStore, tokens: Tokens) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    client, _ = session(store, tokens.viewer, config=WebConfig(secret_key="s", alertmanagers=(url,),
                                                               alertmanager_timeout=1))
    with client:
        page = client.get("/alerts").text
        assert 'data-alertmanager="unreachable"' in page and "Alertmanager unreachable" in page and url in page
        assert 'this list is not "all quiet"' in page.replace("&#34;", '"')
        listed = client.get("/api/v1/alerts", headers=bearer(tokens.viewer)).json()
        assert listed["alerts"] == [] and listed["alertmanager"]["read"] is False
        assert "Alertmanager unreachable" in listed["alertmanager"]["error"]
        runbook = client.get("/alerts/reliablestalecommits", params={"actor": "x"}).text
        assert "Alertmanager did not answer" in runbook and "not firing here" not in runbook
    unconfigured, _ = session(store, tokens.viewer)
    with unconfigured:
        assert 'data-alertmanager="none"' in unconfigured.get("/alerts").text
