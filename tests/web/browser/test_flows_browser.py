"""Workflows and schedules in a real browser (headless Chromium) over a real worker, RabbitMQ and
PostgreSQL (issue 28): open a failed workflow's graph, resume it from the page, see it succeed and its
dead-letter entry resolved; trigger a schedule and see its job run. Screenshots for docs/console.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import reliable
from reliable.schedules import Schedule, storage
from reliable.schedules.boot import build_template
from reliable.states import JobStatus
from reliable.store.selection import JobFilter, Reader, select_jobs
from reliable.store.workflows import WorkflowStore
from reliable.workflows.engine import find_middleware

from browser_support import Rig
from support import wait_for

pytestmark = pytest.mark.integration

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def _status(rig: Rig, workflow_id: str) -> str:
    return str(WorkflowStore(rig.store).get(workflow_id)["status"])


def _dead(rig: Rig, workflow_id: str) -> list[str]:
    flt = JobFilter(statuses=(JobStatus.DEAD,), workflow_id=(workflow_id,), exclude_discarded=True)
    return [job.job_id for job in select_jobs(rig.store, flt, reader=Reader.trusted(), limit=None)]


def test_resume_a_failed_workflow_from_its_graph(page: Any, rig: Rig, tmp_path: Path) -> None:
    flag = tmp_path / "warehouse-down"
    flag.write_text("down")
    node = rig.actors["flow_node"]
    workflow_id = reliable.workflow("browser-etl", [
        reliable.node("extract", node.message("extract", "")),
        reliable.node("load", node.message("load", str(flag)), after=["extract"]),
        reliable.node("report", node.message("report", ""), after=["load"]),
    ]).submit(node.broker)
    wait_for(lambda: _status(rig, workflow_id) == "FAILED", f"workflow {workflow_id} FAILED", timeout=60,
             context=rig.worker.output)
    (dead_job,) = _dead(rig, workflow_id)

    page.goto("/workflows")
    page.get_by_role("link", name=workflow_id).click()
    graph = page.locator("svg.dag")
    expect(graph).to_be_visible()
    expect(graph.locator('g[data-node="load"][data-state="DEAD"]')).to_be_visible()
    expect(graph.locator('g[data-node="report"][data-state="UPSTREAM_FAILED"]')).to_be_visible()
    expect(page.locator('[data-failed-node="load"]')).to_contain_text("the warehouse did not answer")
    rig.screenshot(page, "workflow")

    resume = page.get_by_role("form", name="Resume")
    resume.get_by_label("Reason").fill("warehouse back")
    resume.get_by_role("button", name="Show plan").click()
    expect(page.get_by_role("heading", name=re.compile("Resume plan"))).to_be_visible()
    expect(page.locator("#plan")).to_contain_text("load, report")
    assert WorkflowStore(rig.store).get(workflow_id)["run"] == 1  # the plan changed nothing

    flag.unlink()
    resume = page.get_by_role("form", name="Resume")
    resume.get_by_label("Reason").fill("warehouse back")
    resume.get_by_role("button", name="Resume", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="resume: resumed")).to_be_visible()
    wait_for(lambda: _status(rig, workflow_id) == "SUCCEEDED", f"workflow {workflow_id} SUCCEEDED", timeout=60,
             context=rig.worker.output)
    page.reload()
    expect(page.locator("#workflow-status")).to_have_text("SUCCEEDED")
    expect(page.locator('svg.dag g[data-state="SUCCEEDED"]')).to_have_count(3)
    assert _dead(rig, workflow_id) == []  # the superseded DEAD job left the dead letters
    page.goto("/dlq")
    expect(page.get_by_role("link", name=dead_job, exact=True)).to_have_count(0)
    assert any(e.event == "discarded" and (e.detail or {}).get("command") == "superseded"
               for e in rig.store.events(dead_job))


def test_trigger_a_schedule_from_its_page(page: Any, rig: Rig) -> None:
    node = rig.actors["flow_node"]
    schedule = Schedule("browser-nightly", node.actor_name, cron="0 3 * * *", args=("scheduled", ""))
    storage.declare(rig.store, schedule, build_template(find_middleware(node.broker), node.broker, schedule))

    page.goto("/schedules")
    page.get_by_role("link", name="browser-nightly").click()
    expect(page.locator("#schedule-state")).to_have_text("active")
    trigger = page.get_by_role("form", name="Trigger")
    trigger.get_by_label("Reason").fill("rerun for the late files")
    trigger.get_by_role("button", name="Trigger").click()
    expect(page.get_by_role("status").filter(has_text="triggered schedule browser-nightly")).to_be_visible()
    (event,) = [e for e in storage.list_events(rig.store, "browser-nightly") if e.event == "trigger"]
    job_id = str(event.detail["job_id"])
    wait_for(lambda: rig.store.get(job_id).status is JobStatus.SUCCEEDED, f"job {job_id} SUCCEEDED", timeout=60,
             context=rig.worker.output)
    page.reload()
    expect(page.get_by_role("table").filter(has_text="ada")).to_contain_text("rerun for the late files")
    rig.screenshot(page, "schedule")
