"""The overview's latency and history and the queues page's latency columns in a real browser
(headless Chromium) over a real worker, RabbitMQ and PostgreSQL: the worker's counts reach the
store, the tiles for RETRY_WAIT and scheduled jobs, p50/p95 wait and run, the 1 h / 24 h / 7 d
charts. Screenshots for docs/console.md."""

from __future__ import annotations

import re
from typing import Any

import pytest

from reliable.states import JobStatus
from reliable.store.job_stats import latency

from browser_support import Rig
from support import wait_for

pytestmark = pytest.mark.integration

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def test_latency_tiles_and_chart_windows(page: Any, rig: Rig) -> None:
    assert expect is not None
    pages = rig.actors["pages"]
    queue = pages.queue_name
    done = [pages.send(f"acct-h{n}", 3, 0.02).message_id for n in range(6)]
    later = pages.send_with_options(args=("acct-later", 1, 0.0), delay=3_600_000).message_id
    for job_id in done:
        wait_for(lambda job_id=job_id: rig.store.get(job_id).status is JobStatus.SUCCEEDED, f"{job_id} run",
                 timeout=60, context=rig.worker.output)
    assert rig.store.get(later).status is JobStatus.PENDING
    # The worker writes its counts once per heartbeat interval (0.5 s here).
    wait_for(lambda: latency(rig.store).actors.get((queue, "pages"), {}).get("run", {}).get("count", 0) >= 6,
             "the worker's counts written", timeout=30, context=rig.worker.output)

    page.goto("/")
    expect(page.locator("#card-retry-wait")).to_contain_text("waiting to retry")
    expect(page.locator("#card-scheduled")).to_contain_text(re.compile(r"[1-9]\d* scheduled for later"))
    expect(page.locator("#latency-all")).to_contain_text("run p95")
    expect(page.locator("#latency-all")).to_contain_text("ms")  # three pages of 20 ms: tens of milliseconds
    page.locator("details.latency-actors > summary").click()
    expect(page.locator("#latency-by-actor")).to_contain_text(queue)
    expect(page.locator("figure.chart figcaption").first).to_contain_text("last hour")
    expect(page.locator("figure.chart").first.locator("rect.bar").first).to_be_attached()
    rig.screenshot(page, "overview-history")
    for window, span in (("24h", "last 24 hours"), ("7d", "last 7 days")):
        page.get_by_role("navigation", name="Chart window").get_by_role("link", name=window).click()
        page.wait_for_url(f"{rig.base}/?window={window}")
        expect(page.locator("figure.chart figcaption").first).to_contain_text(span)
        expect(page.locator("figure.chart").first.locator("rect.bar").first).to_be_attached()
        expect(page.locator("#overview-live")).to_have_attribute("data-poll", re.compile(f"window={window}$"))

    page.goto("/queues")
    row = page.locator(f"#queue-{queue}")
    expect(row.locator("td.latency-wait")).to_contain_text(" / ")
    expect(row.locator("td.latency-run")).to_contain_text(re.compile(r"\d+ ms / \d+ ms"))
    expect(page.locator("p.meta").first).to_contain_text("p50 / p95 over the last 1 h")
    rig.screenshot(page, "queues-latency")
