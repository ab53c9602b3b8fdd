"""Testing an app's actors with reliable installed: `reliable.testing` on examples/reliable_app.py.

No RabbitMQ, no PostgreSQL: Dramatiq's StubBroker (the app reads BROKER_URL=stub://) and a SQLite
store of each test's own (the `reliable_store_url` fixture). Run it from the repository root:

    .venv/bin/python -m pytest examples/test_reliable_app.py

(tests/unit/test_examples.py runs it with the suite). See `reliable docs testing`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

import pytest
from reliable import JobStatus
from reliable.testing import Harness

pytest_plugins = ["reliable.testing.pytest_plugin"]  # in your app: in the top conftest.py


@pytest.fixture
def app(reliable_store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The app, imported fresh on a StubBroker and this test's store (it reads both at import)."""
    monkeypatch.setenv("BROKER_URL", "stub://")
    monkeypatch.setenv("RELIABLE_STORE", reliable_store_url)
    sys.modules.pop("examples.reliable_app", None)
    module = importlib.import_module("examples.reliable_app")
    yield module
    sys.modules.pop("examples.reliable_app", None)


@pytest.fixture
def harness(app: ModuleType) -> Iterator[Harness]:
    """The app's broker and store, driven by the test."""
    harness = Harness(app.broker)
    yield harness
    harness.close()


def test_every_welcome_email_is_sent_once(app: ModuleType, harness: Harness) -> None:
    job_ids = [app.send_welcome_email.send(user).message_id for user in range(3)]
    harness.run_until_idle()
    for job_id in job_ids:
        assert harness.state(job_id) is JobStatus.SUCCEEDED
        assert harness.history(job_id) == ["enqueued", "claim", "succeed"]
    assert sorted(app.SENT) == ["welcome:0", "welcome:1", "welcome:2"]


def test_a_missing_image_fails_at_once(app: ModuleType, harness: Harness) -> None:
    job_id = app.make_thumbnail.send("").message_id
    harness.run_until_idle()
    job = harness.job(job_id)
    assert job.status is JobStatus.FAILED
    assert job.attempt == 1 and job.last_error_class == "invalid_input", "a bad input is not retried"


def test_a_thumbnail_whose_worker_died_is_made_once_again(app: ModuleType, harness: Harness) -> None:
    job_id = app.make_thumbnail.send("cat.png").message_id
    assert harness.crash(job_id) == "lease_expired"  # idempotent: recovery re-queues it at once
    assert harness.state(job_id) is JobStatus.PENDING
    harness.run_until_idle()
    assert harness.state(job_id) is JobStatus.SUCCEEDED
    assert harness.job(job_id).attempt == 2
    assert app.SENT == ["thumbnail:cat.png:128"], "the crashed attempt never ran the body"


def test_a_paused_email_waits_for_its_resume(app: ModuleType, harness: Harness) -> None:
    job_id = app.send_welcome_email.send(7).message_id
    assert harness.control.pause(job_id, reason="hold the campaign").outcome == "done"
    harness.run_until_idle()
    assert harness.state(job_id) is JobStatus.PAUSED and app.SENT == []
    assert harness.control.resume(job_id, reason="campaign approved").outcome == "done"
    harness.run_until_idle()
    assert harness.state(job_id) is JobStatus.SUCCEEDED and app.SENT == ["welcome:7"]
    assert harness.history(job_id)[-3:] == ["resume", "claim", "succeed"]
