"""Issue 42, item 1, in a real browser (headless Chromium) over a real `dramatiq` worker, RabbitMQ and
PostgreSQL: the workers page shows the thread running a job (Sidekiq's Busy page) with a link to it;
Quiet with a reason reaches the process (picked up by its heartbeat, its running job goes on, a new
delivery is put off); Resume has it take that delivery and run it; Stop
ends it gracefully and it moves to the recent exits, with who stopped it. Screenshots for docs/console.md."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

import reliable
from reliable.states import JobStatus
from reliable.store.processes import get_process, list_processes

from browser_actors import declare
from browser_support import Rig
from support import RABBITMQ_URL, wait_for
from workers import WorkerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def test_busy_threads_quiet_and_stop_from_the_workers_page(page: Any, rig: Rig, tmp_path: Path) -> None:
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    assert expect is not None
    queue = f"busy_{uuid.uuid4().hex[:8]}"  # a queue of this worker's own: the module's worker never runs its jobs
    url = rig.store.engine.url.render_as_string(hide_password=False)
    producer = RabbitmqBroker(url=RABBITMQ_URL)
    installed = reliable.install(producer, store=url, recovery=False)
    pages = declare(producer, queue)["pages"]
    before = {p.worker_id for p in list_processes(rig.store, live_only=True)}
    env = {"RELIABLE_TEST_BROKER": RABBITMQ_URL, "RELIABLE_TEST_STORE": url, "RELIABLE_TEST_QUEUE": queue}
    mine = WorkerProcess(env, tmp_path / "worker.log", threads=2, app="console_worker", app_dir=Path(__file__).parent)
    try:
        wait_for(lambda: {p.worker_id for p in list_processes(rig.store, live_only=True)} - before,
                 "the new worker process on record", timeout=60, context=mine.output)
        job_id = pages.send("acct-busy", 60, 0.1).message_id
        # The process running the job on its own queue: the rig's worker may go on record meanwhile too.
        (worker_id,) = wait_for(lambda: [p.worker_id for p in list_processes(rig.store, live_only=True)
                                         if p.worker_id not in before and job_id in dict(p.busy)],
                                "its busy thread reported", timeout=60, context=mine.output)

        page.goto("/")
        page.get_by_role("navigation", name="Console").get_by_role("link", name="Workers").click()
        page.wait_for_url(re.compile(r"/workers$"))
        busy = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Thread"))
        thread_row = busy.locator(f'tr[data-job="{job_id}"]')
        expect(thread_row).to_contain_text("pages")
        expect(thread_row).to_contain_text(queue)
        expect(thread_row.locator("td").nth(1)).not_to_contain_text("not reported yet")
        rig.screenshot(page, "workers")

        live = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Jobs held now"))
        row = live.locator(f'tr[data-worker="{worker_id}"]')
        row.get_by_label("Reason").fill("drain before the deploy")
        row.get_by_role("button", name="Quiet").click()
        expect(page.locator("p.flash-ok")).to_contain_text("told to take no new message")
        expect(row).to_contain_text("quiet")
        expect(row).to_contain_text("drain before the deploy")
        wait_for(lambda: (get_process(rig.store, worker_id) or pytest.fail("gone")).command_seen_at,
                 "the quiet picked up", timeout=30, context=mine.output)
        page.reload()
        expect(row).not_to_contain_text("not picked up yet")
        expect(row.get_by_role("button", name="Quiet")).to_have_count(0)
        assert rig.store.get(job_id).status is JobStatus.RUNNING  # quiet: the running job goes on
        rig.screenshot(page, "workers-quiet")

        wait_for(lambda: rig.store.get(job_id).status is JobStatus.SUCCEEDED, "its job to finish", timeout=60,
                 context=mine.output)
        held_back = pages.send("acct-held", 1, 0.01).message_id  # the queue's only consumer is quiet
        wait_for(lambda: any(e.event == "queue_paused_deferred" for e in rig.store.events(held_back)),
                 "the quiet process to put the delivery off", timeout=30, context=mine.output)
        row.get_by_label("Reason").fill("deploy went fine")
        row.get_by_role("button", name="Resume").click()
        expect(page.locator("p.flash-ok")).to_contain_text(f"worker {worker_id} resumed")
        expect(row.get_by_role("button", name="Quiet")).to_have_count(1)
        expect(row.get_by_role("button", name="Resume")).to_have_count(0)
        wait_for(lambda: rig.store.get(held_back).status is JobStatus.SUCCEEDED, "the resumed process to run it",
                 timeout=60, context=mine.output)
        assert rig.store.get(held_back).worker_id == worker_id
        rig.screenshot(page, "workers-resumed")
        row.get_by_label("Reason").fill("retire this host")
        row.get_by_role("button", name="Stop").click()
        expect(row).to_contain_text("stopping")
        wait_for(lambda: (get_process(rig.store, worker_id) or pytest.fail("gone")).exited_at, "the process to stop",
                 timeout=60, context=mine.output)
        page.reload()
        expect(live.locator(f'tr[data-worker="{worker_id}"]')).to_have_count(0)
        exits = page.get_by_role("table").filter(has=page.get_by_role("columnheader", name="Exited"))
        gone = exits.locator(f'tr[data-worker="{worker_id}"]')
        expect(gone).to_contain_text("stopped")
        expect(gone).to_contain_text("after stop by ada")
        assert mine.proc.wait(30) == 0  # Dramatiq's CLI left as on SIGTERM
    finally:
        mine.stop()
        producer.close()
        installed.store.close()
