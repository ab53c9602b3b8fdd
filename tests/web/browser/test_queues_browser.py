"""The queues page in a real browser (headless Chromium) over a real worker, RabbitMQ and
PostgreSQL: pause a queue from the page, see its jobs wait PENDING without spending an attempt and
the banner on every page, resume it and see them run. A screenshot for docs/console.md."""

from __future__ import annotations

from typing import Any

import pytest

from reliable import queue_pauses
from reliable.states import JobStatus

from browser_support import TIMEOUT_MS, Rig
from support import wait_for

pytestmark = pytest.mark.integration

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def test_pause_a_queue_from_the_page_and_resume_it(page: Any, rig: Rig) -> None:
    assert expect is not None
    pages = rig.actors["pages"]
    queue = pages.queue_name
    first = pages.send("acct-q0", 1, 0.0).message_id
    wait_for(lambda: rig.store.get(first).status is JobStatus.SUCCEEDED, "a first job run", timeout=60,
             context=rig.worker.output)
    page.goto("/queues")
    row = page.locator(f"#queue-{queue}")
    row.get_by_label("Reason").fill("downstream maintenance")
    row.get_by_role("button", name="Pause").click()
    expect(page.locator(".flash-ok")).to_contain_text(f"queue {queue} paused")
    expect(page.locator(".banner-paused")).to_contain_text("downstream maintenance")
    # The worker sees the pause within its cache's staleness: probes until one is put off (one sent
    # before may still run), then the jobs whose state is checked.
    probes: list[str] = []

    def probe_deferred() -> bool:
        if not probes or rig.store.get(probes[-1]).status is JobStatus.SUCCEEDED:
            probes.append(pages.send(f"acct-probe{len(probes)}", 1, 0.0).message_id)
        return rig.store.count_job_events(probes[-1], "queue_paused_deferred") >= 1

    wait_for(probe_deferred, "a probe deferred", timeout=30, context=rig.worker.output)
    jobs = [probes[-1], *(pages.send(f"acct-q{n}", 1, 0.0).message_id for n in range(1, 4))]
    wait_for(lambda: all(rig.store.count_job_events(j, "queue_paused_deferred") >= 2 for j in jobs),
             "every job deferred twice", timeout=60, context=rig.worker.output)
    for job_id in jobs:
        job = rig.store.get(job_id)
        assert (job.status, job.attempt) == (JobStatus.PENDING, 0)
    page.goto("/jobs")
    expect(page.locator(".banner-paused")).to_contain_text(queue)
    page.goto("/queues")
    expect(row.locator(".paused-cell")).to_contain_text("downstream maintenance")
    rig.screenshot(page, "queues")
    row.get_by_label("Reason").fill("maintenance over")
    row.get_by_role("button", name="Resume").click()
    expect(page.locator(".flash-ok")).to_contain_text(f"queue {queue} resumed")
    expect(page.locator(".banner-paused")).to_have_count(0)
    wait_for(lambda: all(rig.store.get(j).status is JobStatus.SUCCEEDED for j in jobs), "every job run after the "
             "resume", timeout=TIMEOUT_MS / 1000 * 2, context=rig.worker.output)
    assert [rig.store.get(j).attempt for j in jobs] == [1] * len(jobs)
    assert [(e.event, e.operator, e.reason) for e in queue_pauses.events(rig.store, queue)] == [
        ("pause", "ada", "downstream maintenance"), ("resume", "ada", "maintenance over")]
