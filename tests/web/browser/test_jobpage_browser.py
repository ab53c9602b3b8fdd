"""Issue 42 items 4, 5 and 6 in a real browser (headless Chromium): a long job's page folded with the
last command's operator and reason, states coloured alike on every page and an earlier error shown
as history, the dead letters' bulk menu, and a preview confirmed from another browser. Jobs are
written to the store directly (no worker needed). Screenshots for docs/console.md."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from reliable.control import Control
from reliable.operators import Operator
from reliable.options import STORED_CONTRACT
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob

from browser_support import TIMEOUT_MS, Rig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None

ADA = Operator("ada", "browser-tests", "test")
QUEUE = "jobpage-unserved"  # a queue nobody serves: these jobs only sit in the store


def job(rig: Rig, prefix: str, *, idempotent: bool = True) -> str:
    job_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    options = {} if idempotent else {STORED_CONTRACT: {"idempotent": False}}
    rig.store.register(NewJob(job_id, QUEUE, "export", {"args": [], "kwargs": {}, "options": options}))
    return job_id


def end(rig: Rig, job_id: str, event: Event, error: str | None = "TimeoutError") -> None:
    claim = rig.store.claim(job_id, worker_id="w-browser", lease_ttl=60)
    rig.store.finish(job_id, claim.lease_id, event, worker_id="w-browser",
                     retry_delay=0 if event is Event.RETRY else None,
                     error=ErrorInfo("transient", error, "upstream slow") if error else None)


def test_a_long_jobs_page_is_folded_and_says_who_did_the_last_command(page: Any, rig: Rig) -> None:
    assert expect is not None
    job_id = job(rig, "export")
    claim = rig.store.claim(job_id, worker_id="w-browser", lease_ttl=60)
    for n in range(13):
        rig.store.save_checkpoint(job_id, claim.lease_id, {"row": n * 500}, lease_ttl=60)
        rig.store.record_effect(job_id, claim.lease_id, f"export-row-{n}", attempt_id=claim.attempt_id)
    rig.store.record_event(job_id, "export_progress", detail={"rows": 6500, "file": "s3://exports/acme.csv"})
    Control(rig.store, identity=ADA).cancel(job_id, reason="customer withdrew the export")
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#last-command")).to_contain_text("cancel requested by ada")
    expect(page.locator("#last-command")).to_contain_text("customer withdrew the export")
    fold = page.locator('tbody.fold[data-fold="checkpoint"] details')
    expect(fold.locator("summary")).to_contain_text("checkpoint x13")
    expect(fold.locator("tr.ev-checkpoint").first).to_be_hidden()  # folded until asked
    effects = page.locator('details.fold[data-fold="effects"]')
    expect(effects.locator("summary")).to_contain_text("13 operation keys")
    expect(effects.locator("table")).to_be_hidden()
    detail = page.locator("tr.ev-export_progress dl.kv")
    expect(detail.locator("dt")).to_have_text(["file", "rows"])
    expect(detail.locator("dd")).to_have_text(["s3://exports/acme.csv", "6500"])
    height = page.evaluate("() => document.documentElement.scrollHeight")
    assert height < 2600, height  # the export: 6,875 px
    page.locator("#events-h").scroll_into_view_if_needed()
    rig.screenshot(page, "job-long")
    fold.locator("summary").click()
    expect(fold.locator("tr.ev-checkpoint")).to_have_count(13)
    expect(fold.locator("tr.ev-checkpoint").first).to_be_visible()


def test_states_look_alike_on_every_page_and_an_earlier_error_is_history(page: Any, rig: Rig) -> None:
    assert expect is not None
    failed, dead, flaky = job(rig, "failed"), job(rig, "dead"), job(rig, "flaky")
    end(rig, failed, Event.FAIL)
    end(rig, dead, Event.DEAD_LETTER)
    end(rig, flaky, Event.RETRY)
    end(rig, flaky, Event.SUCCEED, error=None)
    assert rig.store.get(flaky).status is JobStatus.SUCCEEDED

    def background(selector: str) -> str:
        return str(page.locator(selector).first.evaluate("e => getComputedStyle(e).backgroundColor"))

    page.goto(f"/jobs?queue={QUEUE}")
    bad = background('.state[data-state="FAILED"]')
    assert background('.state[data-state="DEAD"]') == bad
    assert background('.state[data-state="SUCCEEDED"]') != bad
    page.goto("/dlq")
    assert background('.state[data-state="DEAD"]') == bad
    page.goto(f"/jobs/{failed}")
    assert background('#job-status .state') == bad
    red = str(page.locator("#last-error").evaluate("e => getComputedStyle(e).color"))
    page.goto(f"/jobs/{flaky}")
    expect(page.locator("#job-status .state")).to_have_text("SUCCEEDED")
    expect(page.locator("dl.facts").first).to_contain_text("Earlier error")
    expect(page.locator("dl.facts").first).not_to_contain_text("Last error")
    assert str(page.locator("#last-error").evaluate("e => getComputedStyle(e).color")) != red


def test_dead_letters_offer_what_applies_and_a_preview_is_confirmed_from_another_browser(
        page: Any, rig: Rig, browser: Any) -> None:
    assert expect is not None
    dead = [job(rig, "dead-bulk", idempotent=False) for _ in range(2)]
    for job_id in dead:
        end(rig, job_id, Event.DEAD_LETTER)
    page.goto("/dlq")
    page.locator("details.bulk-box > summary").click()
    bulk = page.get_by_role("form", name="Bulk action")
    options = bulk.locator("select[name=command] option")
    expect(options).to_have_text(["restart", "requeue", "discard"])  # never pause, stop or cancel on a dead letter
    for job_id in dead:
        page.get_by_label(f"Select {job_id}").check()

    def count(command: str) -> None:
        page.goto("/dlq")
        page.locator("details.bulk-box > summary").click()
        for job_id in dead:
            page.get_by_label(f"Select {job_id}").check()
        form = page.get_by_role("form", name="Bulk action")
        form.locator("select[name=command]").select_option(command)
        form.get_by_label("Reason").fill("handled by hand with the customer")
        form.get_by_role("button", name="Count the jobs").click()
        page.wait_for_url(re.compile(r"/operations/[0-9a-f]+$"))

    count("requeue")  # not idempotent: each would be refused, so confirming would change nothing
    confirm = page.locator("#confirm")
    expect(confirm).to_be_disabled()
    expect(page.locator("#confirm-why")).to_contain_text("every one of the 2 jobs would be refused")
    expect(page.locator("#op-expiry")).to_contain_text("This count expires at")
    rig.screenshot(page, "bulk-nothing-to-confirm")
    page.get_by_role("button", name="Drop").click()

    count("discard")
    operation = page.url
    expect(page.locator("#op-status")).to_have_text("awaiting_confirmation")
    rig.screenshot(page, "dlq-bulk")
    other = browser.new_context(viewport={"width": 1280, "height": 960}, base_url=rig.base)
    try:
        other.set_default_timeout(TIMEOUT_MS)
        tab = other.new_page()
        tab.goto("/login")
        tab.get_by_label("API token").fill(rig.admin_token)
        tab.get_by_role("button", name="Sign in").click()
        tab.wait_for_url(f"{rig.base}/")
        tab.goto(operation)  # the same person in another browser: no cookie of the count
        tab.get_by_role("button", name="Confirm: discard 2 jobs").click()
        expect(tab.locator(".flash-ok")).to_contain_text("confirmed: the operation runs now")
        expect(tab.locator("#op-status")).to_have_text("finished", timeout=TIMEOUT_MS)
    finally:
        other.close()
    for job_id in dead:
        discarded = rig.store.events(job_id, events=["discarded"])
        assert discarded and discarded[-1].operator == "ada"
