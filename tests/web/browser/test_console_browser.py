"""The console in a real browser (headless Chromium) over a real worker, RabbitMQ and PostgreSQL:
sign in, filter the job list, open a job, pause and resume a running job, retry a failed
non-idempotent job with the explicit confirmation. Screenshots for docs/console.md."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from reliable.states import JobStatus
from reliable.store import NewJob
from reliable.store.job_stats import latency

from browser_support import TIMEOUT_MS, Rig
from support import wait_for

pytestmark = pytest.mark.integration

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def status_of(rig: Rig, job_id: str) -> JobStatus:
    """The job's state in the store."""
    return rig.store.get(job_id).status


def wait_status(rig: Rig, job_id: str, *status: JobStatus, timeout: float = 60.0) -> None:
    """Poll the store until the job is in one of `status`."""
    wait_for(lambda: status_of(rig, job_id) in status, f"job {job_id} in {'/'.join(status)}", timeout=timeout,
             context=rig.worker.output)


def act(page: Any, command: str, reason: str) -> None:
    """Fill in the reason of a job page's `command` form and submit it."""
    form = page.get_by_role("form", name=re.compile(f"^{command}", re.IGNORECASE))
    form.get_by_label("Reason").fill(reason)
    form.get_by_role("button", name=re.compile(f"^{command}$", re.IGNORECASE)).click()


def test_sign_in_filter_the_job_list_and_open_a_job(page: Any, rig: Rig) -> None:
    assert expect is not None
    done = [rig.actors["pages"].send(f"acct-{i}", 3, 0.01).message_id for i in range(3)]
    failed = rig.actors["charge"].send("acct-browse", 1299).message_id
    for i in range(3):  # jobs of a queue no worker serves yet: pending in the overview
        rig.store.register(NewJob(f"report-{uuid.uuid4()}", "reports", "monthly_report",
                                  {"args": [f"2026-0{i + 1}"], "kwargs": {}, "options": {}}, owner="team-finance"))
    for job_id in done:
        wait_status(rig, job_id, JobStatus.SUCCEEDED)
    wait_status(rig, failed, JobStatus.FAILED)
    # The charts read the worker's counts, written once per heartbeat interval (0.5 s here).
    wait_for(lambda: latency(rig.store).overall["outcomes"]["succeeded"] >= 3, "the worker's counts written",
             timeout=30, context=rig.worker.output)

    page.clock.install()  # the page's timers run when the test says so
    page.goto("/")
    expect(page.get_by_role("heading", name="Jobs by queue and state")).to_be_visible()
    expect(page.locator("table.counts")).to_contain_text("reports")
    expect(page.locator("figure.chart").first.locator("rect.bar").first).to_be_attached()
    rig.screenshot(page, "overview")
    polls: list[str] = []
    page.on("request", lambda request: polls.append(request.url) if "/overview/live" in request.url else None)
    with page.expect_response(lambda r: "/overview/live" in r.url and r.ok):
        page.clock.run_for(5_000)  # the overview refreshes itself every 5 s while the tab is visible
    page.evaluate("() => Object.defineProperty(document, 'hidden', {configurable: true, get: () => true})")
    seen = len(polls)
    page.clock.run_for(60_000)  # hidden: no polling
    with page.expect_response(lambda r: "/overview/live" in r.url and r.ok):  # visible again: at once
        page.evaluate("() => { Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
                      " document.dispatchEvent(new Event('visibilitychange')); }")
    assert len(polls) == seen + 1, polls

    page.get_by_role("navigation", name="Console").get_by_role("link", name="Jobs").click()
    expect(page.get_by_label("Actor")).to_be_hidden()  # no filter set: the form is folded, rows come first
    page.locator("details.filter-box > summary").click()
    page.get_by_label("Actor").fill("charge")
    page.get_by_role("group", name="State").get_by_label("FAILED").check()
    page.get_by_role("button", name="Filter").click()
    page.wait_for_url(re.compile(r"/jobs\?state=FAILED&actor=charge"))
    rows = page.locator("table.jobs tbody tr")
    expect(rows.filter(has_text=failed)).to_have_count(1)
    expect(rows.filter(has_text=failed)).to_contain_text("ValueError card of acct-browse declined")  # the message
    expect(rows.filter(has_text="SUCCEEDED")).to_have_count(0)
    expect(page.get_by_role("link", name=failed, exact=True)).to_be_visible()  # the whole id
    page.get_by_label("Actor").fill("")
    page.get_by_role("group", name="State").get_by_label("FAILED").uncheck()
    page.get_by_role("button", name="Filter").click()
    expect(rows).to_have_count(7)
    rig.screenshot(page, "jobs")

    page.get_by_role("link", name=failed, exact=True).click()
    page.wait_for_url(f"**/jobs/{failed}")
    expect(page.locator("#job-status .state")).to_have_text("FAILED")
    expect(page.locator("ol.timeline")).to_contain_text("ValueError")
    expect(page.locator("dl.facts").first).to_contain_text("charge")
    expect(page.get_by_role("form", name="Resume")).to_have_count(0)  # only what FAILED allows is a form
    page.get_by_text(re.compile("^Why not")).click()
    expect(page.locator("#why-resume")).to_contain_text("cannot resume a FAILED job")


def test_pause_a_running_job_and_resume_it(page: Any, rig: Rig) -> None:
    assert expect is not None
    job_id = rig.actors["pages"].send("acct-pause", 300, 0.05).message_id
    wait_for(lambda: (rig.store.get(job_id).checkpoint or 0) >= 2, "the job to checkpoint twice", timeout=60,
             context=rig.worker.output)
    page.goto(f"/jobs/{job_id}")
    expect(page.locator("#job-status .state")).to_have_text("RUNNING")
    act(page, "pause", "downstream maintenance")
    expect(page.locator(".flash-ok")).to_contain_text("pause: asked the worker to pause at its next checkpoint")
    # The worker pauses at its next checkpoint; the page notices and reloads with what PAUSED offers.
    expect(page.locator("#job-status .state")).to_have_text("PAUSED", timeout=TIMEOUT_MS)
    paused = rig.store.get(job_id)
    assert paused.status is JobStatus.PAUSED and 2 <= paused.checkpoint < 300
    expect(page.get_by_role("form", name="Pause")).to_have_count(0)
    act(page, "resume", "maintenance over")
    expect(page.locator(".flash-ok")).to_contain_text("resume: moved to PENDING")
    expect(page.locator("#job-status .state")).to_have_text(re.compile("RUNNING|SUCCEEDED"), timeout=TIMEOUT_MS)
    wait_status(rig, job_id, JobStatus.SUCCEEDED)
    expect(page.locator("#job-status .state")).to_have_text("SUCCEEDED", timeout=TIMEOUT_MS)
    attempts = rig.store.attempts(job_id)
    assert [a.outcome for a in attempts] == ["pause_observed", "succeed"]
    assert rig.store.get(job_id).checkpoint == 300
    operators = {(e.event, e.operator, e.reason) for e in rig.store.events(job_id) if e.operator}
    assert ("pause_requested", "ada", "downstream maintenance") in operators
    assert ("resume", "ada", "maintenance over") in operators


def test_retry_a_failed_non_idempotent_job_with_the_explicit_confirmation(page: Any, rig: Rig) -> None:
    assert expect is not None
    job_id = rig.actors["charge"].send("acct-retry", 4200).message_id
    wait_status(rig, job_id, JobStatus.FAILED)
    page.goto(f"/jobs/{job_id[:8]}")  # a unique prefix opens the job
    page.wait_for_url(f"**/jobs/{job_id}")
    retry = page.get_by_role("form", name=re.compile("^Requeue"))
    confirm = retry.get_by_label("I checked: the side effect may run twice")
    expect(confirm).not_to_be_checked()
    rig.screenshot(page, "job")
    retry.get_by_label("Reason").fill("card limit raised; charge did not go through")
    retry.get_by_role("button", name="Requeue").click()
    assert confirm.evaluate("box => box.validity.valueMissing")  # the browser will not submit it unticked
    assert status_of(rig, job_id) is JobStatus.FAILED
    confirm.check()
    retry.get_by_role("button", name="Requeue").click()
    expect(page.locator(".flash-ok")).to_contain_text("requeue: moved to PENDING")
    expect(page.locator("#job-status .state")).to_have_text("SUCCEEDED", timeout=TIMEOUT_MS)
    requeue = rig.store.events(job_id, events=["requeue"])[-1]
    assert requeue.operator == "ada" and requeue.detail["allow_duplicate_side_effects"] is True


def test_bulk_retry_counts_first_and_runs_after_the_confirmation(page: Any, rig: Rig) -> None:
    assert expect is not None
    job_ids = [rig.actors["charge"].send(f"acct-bulk-{i}", 100 + i).message_id for i in range(3)]
    for job_id in job_ids:
        wait_status(rig, job_id, JobStatus.FAILED)

    def count(*, allow_duplicates: bool) -> None:
        page.goto("/jobs?state=FAILED&search=acct-bulk-")
        expect(page.locator("td.id code")).to_have_count(3)
        page.locator("details.bulk-box > summary").click()
        bulk = page.get_by_role("form", name="Bulk action")
        bulk.locator("select[name=command]").select_option("requeue")
        bulk.locator("select[name=scope]").select_option("filter")
        bulk.get_by_label("Reason").fill("the card processor is back")
        if allow_duplicates:
            bulk.get_by_label(re.compile("I checked, their side effect may run twice")).check()
        bulk.get_by_role("button", name="Count the jobs").click()

    count(allow_duplicates=False)  # charge is not idempotent: the count says every job would be refused
    expect(page.locator("#would-refuse")).to_contain_text("3 match; 3 would be refused (all of them")
    expect(page.locator("#would-refuse")).to_contain_text("is not idempotent")
    expect(page.get_by_role("button", name="Confirm: requeue 3 jobs")).to_be_disabled()  # it would change nothing
    rig.screenshot(page, "bulk-refused")
    page.get_by_role("button", name="Drop").click()
    count(allow_duplicates=True)
    expect(page.locator("#would-refuse")).to_have_text("3 match; none would be refused as they stand now.")
    expect(page.get_by_role("heading", name="requeue · 3 jobs")).to_be_visible()
    expect(page.locator("#op-status")).to_have_text("awaiting_confirmation")
    rig.screenshot(page, "bulk")
    assert {status_of(rig, job_id) for job_id in job_ids} == {JobStatus.FAILED}  # counted, nothing changed
    page.get_by_role("button", name="Confirm: requeue 3 jobs").click()
    expect(page.locator("#op-status")).to_have_text("finished", timeout=TIMEOUT_MS)
    expect(page.locator("table.jobs tbody tr")).to_have_count(3)
    for job_id in job_ids:
        wait_status(rig, job_id, JobStatus.SUCCEEDED)
        requeue = rig.store.events(job_id, events=["requeue"])[-1]
        assert requeue.operator == "ada" and requeue.reason == "the card processor is back"
        assert requeue.detail["allow_duplicate_side_effects"] is True and requeue.detail["operation_id"]


def test_every_page_works_under_the_content_security_policy(page: Any, rig: Rig) -> None:
    """The console's own stylesheet and script load (no inline ones: the policy would refuse them), the
    page cannot be framed, and a page that breaks the policy fails the `page` fixture."""
    assert expect is not None
    for path in ("/", "/jobs", "/dlq", "/review", "/operations", "/queues", "/workflows", "/schedules", "/workers",
                 "/alerts", "/docs"):
        response = page.goto(path)
        assert response is not None and response.ok, path
        assert "frame-ancestors 'none'" in response.headers["content-security-policy"], path
        assert response.headers["x-frame-options"] == "DENY", path
        assert page.evaluate("() => document.styleSheets.length && document.styleSheets[0].cssRules.length") > 0
        assert page.evaluate("() => getComputedStyle(document.querySelector('a.skip')).position") == "absolute", path
    # A page without the console's headers (served by the browser itself) framing a console page: even
    # on the console's own origin (its session cookie sent), the frame is refused, not drawn.
    framer = f"{rig.base}/not-a-console-page"
    page.route(framer, lambda route: route.fulfill(content_type="text/html", body='<iframe src="/jobs"></iframe>'))
    page.goto(framer)
    framed = [frame for frame in page.frames if frame is not page.main_frame]
    assert framed and all('name="csrf-token"' not in frame.content() for frame in framed)
