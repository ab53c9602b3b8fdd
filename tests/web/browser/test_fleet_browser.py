"""The console's workers and alerts pages in a real browser (headless Chromium), over real `dramatiq`
workers, RabbitMQ and PostgreSQL (issue 28, items 1 and 5): a worker process appears on the workers
page with the job it holds, and after a kill -9 it leaves the live table for the recent exits
(marked pid_gone by the module's other worker, on the same host); an alert's runbook opens for its
own actor. Screenshots for docs/console.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from reliable import defaults
from reliable.alerts import AlertEngine, load_rules
from reliable.alerts.runbooks import RunbookRenderer
from reliable.states import Event, JobStatus
from reliable.store import NewJob
from reliable.store.processes import list_processes

from browser_support import Rig
from support import RABBITMQ_URL, wait_for
from workers import WorkerProcess

pytestmark = pytest.mark.integration

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def _live_ids(rig: Rig) -> set[str]:
    return {p.worker_id for p in list_processes(rig.store, live_only=True)}


def test_a_worker_appears_and_is_marked_exited_after_kill_9(page: Any, rig: Rig, tmp_path: Path) -> None:
    assert expect is not None
    queue = rig.actors["pages"].queue_name
    wait_for(lambda: len(_live_ids(rig)) == 1, "the module's worker on record", timeout=60, context=rig.worker.output)
    before = _live_ids(rig)
    url = rig.store.engine.url.render_as_string(hide_password=False)
    mine = WorkerProcess({"RELIABLE_TEST_BROKER": RABBITMQ_URL, "RELIABLE_TEST_STORE": url,
                          "RELIABLE_TEST_QUEUE": queue}, tmp_path / "worker.log", threads=2, app="console_worker",
                         app_dir=Path(__file__).parent)
    try:
        wait_for(lambda: len(_live_ids(rig) - before) == 1, "the new worker process on record", timeout=60,
                 context=mine.output)
        (worker_id,) = _live_ids(rig) - before
        record = next(p for p in list_processes(rig.store) if p.worker_id == worker_id)
        job_id = rig.actors["pages"].send("acct-fleet", 200, 0.05).message_id
        wait_for(lambda: (rig.store.get(job_id).checkpoint or 0) >= 1, "the job to run", timeout=60,
                 context=rig.worker.output)
        holder = rig.store.get(job_id).worker_id

        page.goto("/")
        page.get_by_role("navigation", name="Console").get_by_role("link", name="Workers").click()
        page.wait_for_url(re.compile(r"/workers$"))
        live = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Jobs held now"))
        row = live.locator(f'tr[data-worker="{worker_id}"]')
        expect(row).to_contain_text(record.host)
        expect(row).to_contain_text(str(record.pid))
        expect(row).to_contain_text(queue)
        expect(live.locator(f'tr[data-worker="{holder}"]').get_by_role("link")).to_have_text(job_id[:12])
        rig.screenshot(page, "workers")

        mine.kill()  # SIGKILL: no shutdown hook marks it exited
        wait_for(lambda: next(p for p in list_processes(rig.store) if p.worker_id == worker_id).exited_at
                 is not None, "the other worker to see the death", timeout=60, context=rig.worker.output)
        page.reload()
        expect(live.locator(f'tr[data-worker="{worker_id}"]')).to_have_count(0)
        exits = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Exited"))
        expect(exits.locator(f'tr[data-worker="{worker_id}"]')).to_contain_text("pid_gone")
        gone = next(p for p in list_processes(rig.store) if p.worker_id == worker_id)
        assert gone.exit_reason == "pid_gone" and gone.exit_observed_by in before
    finally:
        mine.stop()
    wait_for(lambda: rig.store.get(job_id).status is JobStatus.SUCCEEDED, "the job to finish", timeout=120,
             context=rig.worker.output)


def test_an_alerts_runbook_opens_for_its_own_actor(page: Any, rig: Rig) -> None:
    assert expect is not None
    for actor in ("send_invoice", "send_receipt"):
        job_id = f"dead-{actor}"
        rig.store.register(NewJob(job_id=job_id, queue="billing", actor=actor, message={}, owner="team-billing"))
        claim = rig.store.claim(job_id, worker_id="w", lease_ttl=60)
        rig.store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w")
    rules = [r for r in load_rules(defaults.path("alert_rules")) if r.name == "ReliableDeadLetterGrowth"]
    AlertEngine(rig.store, rules, RunbookRenderer(defaults.path("runbooks"))).evaluate()

    page.goto("/")
    page.get_by_role("navigation", name="Console").get_by_role("link", name="Alerts").click()
    rows = page.locator("table.alerts tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.first).to_contain_text("firing")
    rig.screenshot(page, "alerts")
    page.get_by_role("link", name="Runbook of ReliableDeadLetterGrowth for send_receipt").click()
    page.wait_for_url(re.compile(r"/alerts/reliabledeadlettergrowth\?queue=billing&actor=send_receipt$"))
    runbook = page.locator("article.runbook")
    expect(runbook.get_by_role("heading", level=2)).to_contain_text("ReliableDeadLetterGrowth")
    expect(runbook).to_contain_text("Job dead-send_receipt: DEAD")
    expect(runbook).not_to_contain_text("dead-send_invoice")
    expect(runbook.locator("code", has_text="reliable dlq requeue dead-send_receipt")).to_have_count(1)
    rig.screenshot(page, "runbook")
