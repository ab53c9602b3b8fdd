"""`reliable schedules`: list and show, pause / resume / trigger audited, run."""

from __future__ import annotations

import json

import pika
import pytest
from click.testing import CliRunner, Result
from schedules_support import T0, slot_id, template

from reliable import Schedule
from reliable.cli.main import cli
from reliable.schedules import Scheduler, storage
from reliable.states import JobStatus
from reliable.store import StateStore

from support import Clock


def run(store_url: str, *args: str, operator: str = "carol") -> Result:
    return CliRunner().invoke(cli, ["schedules", *args, "--store", store_url],
                              env={"RELIABLE_OPERATOR": operator, "RELIABLE_BROKER": ""})


def seeded(store_url: str) -> StateStore:
    store = StateStore(store_url, clock=Clock(T0))
    storage.declare(store, Schedule("nightly", "export", cron="0 2 * * *", timezone="Europe/Paris",
                                    kwargs={"account": "a1"}, misfire="catch_up", catch_up_max=2), template("export"))
    storage.declare(store, Schedule("minutely", "work", every="1m"), template())
    Scheduler(store, None).tick(T0 + 120)
    return store


def test_list(sqlite_url: str) -> None:
    seeded(sqlite_url)
    done = run(sqlite_url, "list")
    assert done.exit_code == 0, done.output
    lines = done.output.splitlines()
    assert any("minutely" in line and "every 60s" in line and "active" in line and "skip" in line for line in lines)
    assert any("nightly" in line and "cron 0 2 * * * (Europe/Paris)" in line and "catch_up" in line for line in lines)
    as_json = json.loads(run(sqlite_url, "list", "--json").output)
    assert [s["name"] for s in as_json] == ["minutely", "nightly"]
    assert as_json[0]["last_slot"] == T0 + 120 and as_json[0]["next_slot"] == T0 + 180


def test_show_lists_slots_with_jobs_and_the_audit_trail(sqlite_url: str) -> None:
    store = seeded(sqlite_url)
    job_id = slot_id(store, "minutely", T0 + 120)
    done = run(sqlite_url, "show", "minutely")
    assert done.exit_code == 0, done.output
    assert "schedule minutely: every 60s -> work(args=[], kwargs={})" in done.output
    assert job_id in done.output and "PENDING" in done.output and "on_time" in done.output
    assert "declared" in done.output
    shown = json.loads(run(sqlite_url, "show", "minutely", "--json").output)
    assert [(s["slot_at"], s["job_id"], s["status"]) for s in shown["slots"]] == [
        (T0 + 120, job_id, "PENDING"), (T0 + 60, slot_id(store, "minutely", T0 + 60), "PENDING")]
    assert store.get(job_id).status is JobStatus.PENDING
    missing = run(sqlite_url, "show", "nope")
    assert missing.exit_code == 2 and "no schedule named 'nope'" in missing.output


def test_pause_and_resume_are_audited(sqlite_url: str) -> None:
    seeded(sqlite_url)
    refused = run(sqlite_url, "pause", "minutely")
    assert refused.exit_code == 2 and "needs a reason" in refused.output
    done = run(sqlite_url, "pause", "minutely", "--reason", "db maintenance")
    assert done.exit_code == 0 and "paused schedule minutely as carol" in done.output
    again = run(sqlite_url, "pause", "minutely", "--reason", "twice")
    assert again.exit_code == 1 and "already paused" in again.output
    listed = run(sqlite_url, "list").output
    assert any("minutely" in line and "paused" in line for line in listed.splitlines())
    resumed = run(sqlite_url, "resume", "minutely", "--reason", "done", "--operator", "dave", "--json")
    assert resumed.exit_code == 0 and json.loads(resumed.output)["paused"] is False
    events = json.loads(run(sqlite_url, "show", "minutely", "--json").output)["events"]
    assert [(e["event"], e["operator"], e["reason"]) for e in events if e["event"] in ("pause", "resume")] == [
        ("pause", "carol", "db maintenance"), ("resume", "dave", "done")]
    assert all(e["host"] and e["at"] for e in events if e["event"] in ("pause", "resume"))
    assert run(sqlite_url, "resume", "nope", "--reason", "x").exit_code == 2


@pytest.mark.integration
def test_trigger_registers_publishes_and_audits(sqlite_url: str, rabbitmq_url: str, queue_name: str) -> None:
    store = StateStore(sqlite_url, clock=Clock(T0))
    storage.declare(store, Schedule("adhoc", "work", every="1h"), template(queue=queue_name))
    without = run(sqlite_url, "trigger", "adhoc", "--reason", "now")
    assert without.exit_code == 2 and "--broker" in without.output
    done = CliRunner().invoke(cli, ["schedules", "trigger", "adhoc", "--store", sqlite_url, "--reason",
                                    "month-end rerun", "--broker", rabbitmq_url], env={"RELIABLE_OPERATOR": "erin"})
    assert done.exit_code == 0, done.output
    job_id = done.output.split("job ")[-1].strip()
    assert store.get(job_id).status is JobStatus.PENDING
    connection = pika.BlockingConnection(pika.URLParameters(rabbitmq_url))
    try:
        method, _, body = connection.channel().basic_get(queue_name, auto_ack=True)
    finally:
        connection.close()
    assert method is not None and json.loads(body)["message_id"] == job_id
    (event,) = [e for e in storage.list_events(store, "adhoc") if e.event == "trigger"]
    assert (event.operator, event.reason, event.detail) == ("erin", "month-end rerun", {"job_id": job_id})
    assert run(sqlite_url, "trigger", "adhoc").exit_code == 2  # no reason: nothing written
    assert len([e for e in storage.list_events(store, "adhoc") if e.event == "trigger"]) == 1


@pytest.mark.integration
def test_run_once(sqlite_url: str, rabbitmq_url: str) -> None:
    StateStore(sqlite_url)  # migrated by the fixture; no schedule: a tick that fires nothing
    done = CliRunner().invoke(cli, ["schedules", "run", "--once", "--json", "--store", sqlite_url, "--broker",
                                    rabbitmq_url])
    assert done.exit_code == 0, done.output
    report = json.loads(done.output)
    assert report["fired"] == [] and report["skipped"] == [] and report["now"] > T0 - 10**9
