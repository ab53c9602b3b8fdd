"""Issue 42, item 5, in a real browser (headless Chromium): purging dead letters from the dead-letter
page is its bulk discard (purge is discard's alias: docs/control.md, "Purge is discard"): the page
says so, the filter's jobs are counted first, the reason is required, the count is confirmed, every
job gets its audited `discarded` event and leaves the listing; a dead letter of another queue stays.
A screenshot for docs/console.md."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from reliable.states import Event
from reliable.store import ErrorInfo, NewJob

from browser_support import Rig
from support import wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def _dead(rig: Rig, job_id: str, queue: str) -> None:
    rig.store.register(NewJob(job_id, queue, "pages", {"args": ["acct", 1, 0.0], "kwargs": {}, "options": {}}))
    claim = rig.store.claim(job_id, worker_id="w-elsewhere", lease_ttl=600)
    rig.store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w-elsewhere",
                     error=ErrorInfo("permanent", "ValueError", "poison row"))


def test_purge_the_dead_letters_of_a_queue_from_the_dlq_page(page: Any, rig: Rig) -> None:
    assert expect is not None
    queue, other = f"purge_{uuid.uuid4().hex[:6]}", f"keep_{uuid.uuid4().hex[:6]}"
    dead = [f"{queue}-d{i}" for i in range(3)]
    for job_id in dead:
        _dead(rig, job_id, queue)
    _dead(rig, f"{other}-d", other)

    page.goto(f"/dlq?queue={queue}")
    expect(page.get_by_text(re.compile(r"discard them \(purge: the same command"))).to_be_visible()
    expect(page.locator("table tbody tr")).to_have_count(3)
    page.get_by_text("Bulk action").first.click()
    form = page.get_by_role("form", name="Bulk action")
    form.get_by_label("Command").select_option("discard")
    form.get_by_label("Act on").select_option("filter")
    form.get_by_label("Reason").fill("a poison batch: purge it")
    form.get_by_role("button", name="Count the jobs").click()

    page.wait_for_url(re.compile(r"/operations/[^/]+$"))
    confirm = page.get_by_role("button", name="Confirm: discard 3 jobs")
    expect(confirm).to_be_visible()
    assert not any(e.event == "discarded" for j in dead for e in rig.store.events(j))  # counted, nothing done yet
    rig.screenshot(page, "dlq-purge")
    confirm.click()
    wait_for(lambda: all(any(e.event == "discarded" for e in rig.store.events(j)) for j in dead),
             "the dead letters discarded", timeout=60)
    audit = [e for e in rig.store.events(dead[0]) if e.event == "discarded"]
    assert len(audit) == 1 and audit[0].operator == "ada" and audit[0].reason == "a poison batch: purge it"
    assert not any(e.event == "discarded" for e in rig.store.events(f"{other}-d"))
    page.goto(f"/dlq?queue={queue}")
    expect(page.locator(f'a[href*="{queue}-d"]')).to_have_count(0)
    page.goto(f"/dlq?queue={other}")
    expect(page.locator(f'a[href*="{other}-d"]').first).to_be_visible()
