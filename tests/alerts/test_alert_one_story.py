"""One incident, one notification per condition, to the team that owns the failing jobs (issue 41).

A real Prometheus (shipped PromQL rules, exported) scrapes a worker's metrics; the store evaluator
(shipped store rules) reads the same jobs; both send to a real Alertmanager running the shipped
example's routing tree and inhibitions, whose receivers are webhooks recorded here. A burst of
dead letters for one actor owned by team-payments raises ReliableDeadLetterGrowth (store: jobs
still DEAD) and ReliableErrorBudgetBurnFast (Prometheus: counters, owner joined from
reliable_actor_owner); its slow burn, the same incident, is inhibited. Requeued, the jobs succeed
and both resolve. Measured on main: the store and PromQL copies of the dead-letter and burn
conditions paged separately, the PromQL ones to owner "platform".
"""

from __future__ import annotations

import collections
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, make_wsgi_app

from reliable.alerts import AlertEngine, AlertmanagerClient, DeliveryPolicy, export_yaml, load_rules
from reliable.alerts.runbooks import RunbookRenderer
from reliable.control import Control
from reliable.exporter import start_server
from reliable.metrics import Metrics
from reliable.operators import Operator
from reliable.states import Event
from reliable.store import NewJob, StateStore

from monitoring import Alertmanager, Prometheus, Webhooks, fast_alertmanager_config, require_monitoring, running
from support import free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow]
BURST = 10


def _run(store: StateStore, job_id: str, actor: str, queue: str, owner: str, event: Event) -> None:
    store.register(NewJob(job_id=job_id, queue=queue, actor=actor, message={}, owner=owner))
    claim = store.claim(job_id, worker_id="w", lease_ttl=60)
    store.finish(job_id, claim.lease_id, event, worker_id="w")


def test_one_incident_pages_its_owner_once_per_condition_and_resolves(store: StateStore, tmp_path: Path) -> None:
    require_monitoring()
    import httpx

    rules = load_rules(ROOT / "alert_rules")
    (tmp_path / "rules.yml").write_text(export_yaml(rules))
    registry = CollectorRegistry()
    metrics = Metrics(registry)  # a worker's metrics, fed by the store's committed events
    metrics.track("charge", "payments", owner="team-payments")
    metrics.track("send", "mail", owner="team-mail")
    store.add_listener(metrics)
    app, scraping = make_wsgi_app(registry), threading.Lock()

    def scraped(environ: dict[str, Any], start_response: Any) -> Any:
        with scraping:  # a scrape sees a batch of events whole (below), as Prometheus sees one scrape
            return app(environ, start_response)

    server, _ = start_server(scraped, port=free_port())
    with Webhooks() as hooks:
        am = Alertmanager(tmp_path, fast_alertmanager_config(tmp_path, hooks.url, wait="5s"))
        prometheus = Prometheus(tmp_path, rules=tmp_path / "rules.yml",
                                targets=[f"127.0.0.1:{server.server_port}"], alertmanager=am.url)
        try:
            with running(am, prometheus), httpx.Client(timeout=3) as http:
                engine = AlertEngine(store, rules, RunbookRenderer(ROOT / "runbooks"),
                                     client=AlertmanagerClient([am.url], http),
                                     policy=DeliveryPolicy(evaluation_interval=1))
                # Prometheus has seen the counters at 0 (as workers create them at boot): the burst is an increase.
                wait_for(lambda: prometheus.query('reliable_dead_letters_total{actor="charge"}'),
                         "Prometheus to scrape the worker's metrics", timeout=20)
                for i in range(3):  # another team's actor, healthy: nobody is paged for it
                    _run(store, f"mail-{i}", "send", "mail", "team-mail", Event.SUCCEED)
                # The incident: a burst of dead letters for charge (team-payments).
                for i in range(BURST):
                    _run(store, f"charge-{i}", "charge", "payments", "team-payments", Event.DEAD_LETTER)
                engine.run_once()

                firing = {"ReliableDeadLetterGrowth", "ReliableErrorBudgetBurnFast"}

                def seen() -> str:
                    return (f"notified: {hooks.notifications()}\nPrometheus fires: {prometheus.firing()}\n"
                            f"Alertmanager holds: {am.alerts()}\n{prometheus.log.read_text()[-1500:]}")

                wait_for(lambda: firing <= {name for _, name, status in hooks.notifications() if status == "firing"},
                         "both conditions to be notified", timeout=40, context=seen)
                burn = next(a for a in am.alerts("ReliableErrorBudgetBurnFast"))
                assert burn["labels"]["owner"] == "team-payments" and burn["labels"]["actor"] == "charge"
                # The slow burn fires too, inhibited (Alertmanager marks it when its group flushes).
                slow = wait_for(lambda: [a for a in am.alerts("ReliableErrorBudgetBurnSlow")
                                         if a["status"]["state"] == "suppressed"], "the slow burn to be inhibited",
                                timeout=20, context=seen)
                assert slow[0]["status"]["inhibitedBy"] and slow[0]["labels"]["owner"] == "team-payments"

                # Resolution: the dead letters are requeued and succeed, and the actor keeps succeeding.
                control = Control(store, identity=Operator("alice", "box", "test"))
                for i in range(BURST):
                    control.requeue(f"charge-{i}", reason="card processor fixed", allow_duplicate_side_effects=True)
                    claim = store.claim(f"charge-{i}", worker_id="w", lease_ttl=60)
                    store.finish(f"charge-{i}", claim.lease_id, Event.SUCCEED, worker_id="w")
                # 2,000 later successes (fed to the listener as the store would: 2,000 jobs through the
                # store would take a minute) bring the error ratio under the slow burn's 1% too. One
                # scrape sees them all: half of them would end the fast burn (and its inhibition) first.
                with scraping:
                    for i in range(2000):
                        metrics({"event": "succeed", "to_status": "SUCCEEDED", "from_status": "RUNNING",
                                 "actor": "charge", "queue": "payments", "job_id": f"later-{i}"})
                engine.run_once()

                wait_for(lambda: firing <= {name for _, name, status in hooks.notifications() if status == "resolved"},
                         "both conditions to resolve", timeout=40, context=seen)
        finally:
            server.shutdown()
            server.server_close()

    notified = hooks.notifications()
    counts = collections.Counter(notified)
    assert counts == {("team-payments", "ReliableDeadLetterGrowth", "firing"): 1,
                      ("team-payments", "ReliableDeadLetterGrowth", "resolved"): 1,
                      ("team-payments-page", "ReliableErrorBudgetBurnFast", "firing"): 1,
                      ("team-payments-page", "ReliableErrorBudgetBurnFast", "resolved"): 1,
                      }, notified
