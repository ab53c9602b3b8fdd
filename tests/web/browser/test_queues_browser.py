"""The queues page in a real browser (headless Chromium) over a real worker, RabbitMQ and
PostgreSQL: pause a queue from the page, see its jobs wait PENDING without spending an attempt and
the banner on every page, resume it and see them run. A screenshot for docs/console.md."""

from __future__ import annotations

import uuid
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
    row.get_by_role("link", name="Pause…").click()  # the queue's own page carries the form (issue 42)
    page.get_by_label("Reason").fill("downstream maintenance")
    page.get_by_role("button", name="Pause").click()
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
    row.get_by_role("link", name="Resume…").click()
    page.get_by_label("Reason").fill("maintenance over")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator(".flash-ok")).to_contain_text(f"queue {queue} resumed")
    expect(page.locator(".banner-paused")).to_have_count(0)
    wait_for(lambda: all(rig.store.get(j).status is JobStatus.SUCCEEDED for j in jobs), "every job run after the "
             "resume", timeout=TIMEOUT_MS / 1000 * 2, context=rig.worker.output)
    assert [rig.store.get(j).attempt for j in jobs] == [1] * len(jobs)
    assert [(e.event, e.operator, e.reason) for e in queue_pauses.events(rig.store, queue)] == [
        ("pause", "ada", "downstream maintenance"), ("resume", "ada", "maintenance over")]


def test_the_queues_page_pages_through_more_queues_than_one_page_holds(page: Any, rig: Rig) -> None:
    """Issue 42 at scale: 105 queues (one page holds 100), found by a part of their names, paged
    through with Next page and back with First page."""
    from sqlalchemy import delete

    from reliable.store import NewJob
    from reliable.store.schema import jobs
    from reliable.web.queues import PAGE

    assert expect is not None
    prefix = f"many{uuid.uuid4().hex[:6]}"
    names = [f"{prefix}-{n:03d}" for n in range(PAGE + 5)]
    rig.store.register_many([NewJob(f"{name}-job", name, "work", {"args": [], "kwargs": {}, "options": {}})
                             for name in names])
    try:
        page.goto("/queues")
        page.get_by_label("Queue name contains").fill(prefix)
        page.get_by_role("button", name="Find").click()
        expect(page.locator("#queues-count")).to_contain_text(f"{PAGE} of {PAGE + 5} queues")
        rows = page.locator("table.queues tbody tr")
        expect(rows).to_have_count(PAGE)
        expect(rows.first).to_have_attribute("data-queue", names[0])
        expect(rows.last).to_have_attribute("data-queue", names[PAGE - 1])
        page.get_by_role("link", name="Next page").click()
        expect(rows).to_have_count(5)
        expect(rows.first).to_have_attribute("data-queue", names[PAGE])
        expect(page.get_by_role("link", name="Next page")).to_have_count(0)
        expect(page.get_by_label("Queue name contains")).to_have_value(prefix)  # the search is kept
        page.get_by_role("link", name="First page").click()
        expect(rows.first).to_have_attribute("data-queue", names[0])
    finally:
        with rig.store.write() as conn:
            conn.execute(delete(jobs).where(jobs.c.queue.in_(names)))
