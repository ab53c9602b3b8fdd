"""Issue 42, item 3, in a real browser (headless Chromium): the queues page states the window of its
per-hour rate, and clears a queue's PENDING jobs as a bulk operation: counted first, with a reason,
confirmed, audited on every job (PENDING -> CANCELLED, the cancel the state machine allows); a RUNNING
job of the same queue is left alone. A screenshot for docs/console.md."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from reliable.states import JobStatus
from reliable.store import NewJob

from browser_support import Rig
from support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def test_clear_a_queues_pending_jobs_from_the_queues_page(page: Any, rig: Rig) -> None:
    assert expect is not None
    queue = f"clear_{uuid.uuid4().hex[:6]}"  # no worker consumes it: its jobs stay PENDING
    pending = [f"{queue}-p{i}" for i in range(3)]
    for job_id in [*pending, f"{queue}-run"]:
        rig.store.register(NewJob(job_id, queue, "pages", {"args": ["acct", 1, 0.0], "kwargs": {}, "options": {}}))
    rig.store.claim(f"{queue}-run", worker_id="w-elsewhere", lease_ttl=600)

    page.goto("/queues")
    expect(page.get_by_role("columnheader", name=re.compile(r"Finished per hour \(avg over 24 h\)"))).to_have_count(1)
    row = page.locator(f'tr[data-queue="{queue}"]')
    row.get_by_role("link", name="Clear pending…").click()  # the queue's own page: no form per row
    form = page.get_by_role("form", name=f"Clear the pending jobs of {queue}")
    form.get_by_label("Why clear").fill("a bad deploy enqueued these twice")
    rig.screenshot(page, "queues-clear-form")
    form.get_by_role("button", name="Count the 3 pending").click()

    page.wait_for_url(re.compile(r"/operations/[^/]+$"))
    confirm = page.get_by_role("button", name="Confirm: cancel 3 jobs")
    expect(confirm).to_be_visible()
    assert all(rig.store.get(j).status is JobStatus.PENDING for j in pending)  # counted, nothing changed yet
    rig.screenshot(page, "queues-clear")
    confirm.click()
    wait_for(lambda: all(rig.store.get(j).status is JobStatus.CANCELLED for j in pending), "the pending jobs cancelled",
             timeout=60)
    assert rig.store.get(f"{queue}-run").status is JobStatus.RUNNING
    audit = [e for e in rig.store.events(pending[0]) if e.to_status == "CANCELLED"]
    assert len(audit) == 1 and audit[0].operator == "ada" and audit[0].reason == "a bad deploy enqueued these twice"
    page.goto("/queues")
    expect(page.locator(f'tr[data-queue="{queue}"]').get_by_text("Clear pending")).to_have_count(0)


def test_cap_an_actors_concurrency_from_the_queues_page(page: Any, rig: Rig) -> None:
    from reliable.limits import Limits, limit_spec
    from reliable.limits.storage import LimitStore
    from reliable.store.limit_settings import get_limit

    assert expect is not None
    actor = f"export_{uuid.uuid4().hex[:6]}"
    LimitStore(rig.store).ensure(limit_spec(actor, Limits(concurrency=8)), "")
    page.goto("/queues#limits")
    row = page.locator(f'tr[data-actor="{actor}"]')
    expect(row).to_contain_text("8")
    row.get_by_role("spinbutton", name="Concurrency").fill("2")
    row.get_by_label("Reason").fill("the export API throttles us")
    row.get_by_role("button", name="Set").click()
    expect(page.locator("p.flash-ok")).to_contain_text(f"{actor}: concurrency 2 of 8 declared.")
    expect(row.locator("td").nth(3)).to_have_text("2")
    rig.screenshot(page, "queues-limits")
    assert (get_limit(rig.store, actor) or pytest.fail("no row")).effective == 2
    row.get_by_label("Reason").fill("recovered")
    row.get_by_role("button", name="Clear the cap").click()
    expect(row.locator("td").nth(3)).to_have_text("-")
    assert (get_limit(rig.store, actor) or pytest.fail("no row")).effective == 8
