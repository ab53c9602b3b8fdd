"""The examples in examples/ run: each actor once through a real Dramatiq Worker on StubBroker + SQLite.

The example modules read BROKER_URL=stub:// (StubBroker) and RELIABLE_STORE (a migrated SQLite file
in tmp_path), so they are imported fresh for every test.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import dramatiq
import httpx
import pytest
from click.testing import CliRunner
from dramatiq import Worker

from reliable.cli.main import cli
from reliable.control import Control
from reliable.middleware import ReliableMiddleware
from reliable.policy import Policy
from reliable.recovery import Recovery
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.testing import middleware_of, sqlite_store_url

from support import wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
INSTALL_LINE = ('reliable.install(broker, store=os.environ.get("RELIABLE_STORE", "sqlite:///reliable.db"), '
                'policies="examples/policies/")')


def _forget_examples() -> None:
    for name in list(sys.modules):
        if name == "examples" or name.startswith("examples."):
            del sys.modules[name]


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """StubBroker + a migrated SQLite store for the examples; the repository root as cwd."""
    url = sqlite_store_url(tmp_path)
    monkeypatch.setenv("BROKER_URL", "stub://")
    monkeypatch.setenv("RELIABLE_STORE", url)
    monkeypatch.setenv("EXPORT_DIR", str(tmp_path / "exports"))
    monkeypatch.setenv("PAGE_SECONDS", "0")
    monkeypatch.chdir(REPO)
    monkeypatch.syspath_prepend(str(REPO))
    _forget_examples()
    yield tmp_path
    _forget_examples()


def load(name: str) -> ModuleType:
    return importlib.import_module(f"examples.{name}")


@contextmanager
def worker(broker: dramatiq.Broker) -> Iterator[Worker]:
    broker.emit_after("process_boot")
    w = Worker(broker, worker_timeout=50, worker_threads=4)
    w.start()
    try:
        yield w
    finally:
        w.stop()
        broker.close()
        for middleware in broker.middleware:
            if isinstance(middleware, ReliableMiddleware):
                middleware.store.close()


def wait_status(store: StateStore, job_id: str, status: JobStatus) -> None:
    wait_for(lambda: store.get(job_id).status is status, f"job {job_id} to be {status.value}")


def events(store: StateStore, job_id: str) -> list[str]:
    return [e.event for e in store.events(job_id)]


# -- plain app -> reliable app: two lines ---------------------------------------------------------


def _diff() -> list[str]:
    result = subprocess.run(["diff", "-u", "examples/plain_app.py", "examples/reliable_app.py"], cwd=REPO,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 1, result.stderr
    return result.stdout.splitlines()


def test_reliable_app_is_the_plain_app_plus_two_lines() -> None:
    changed = [line for line in _diff()[2:] if line[:1] in "+-"]
    assert changed == ["+import reliable", "+" + INSTALL_LINE]


def test_readme_shows_the_real_diff() -> None:
    hunks = "\n".join(line for line in _diff() if not line.startswith(("---", "+++")))
    readme = (EXAMPLES / "README.md").read_text()
    assert hunks in readme, "regenerate the diff in examples/README.md (diff -u examples/plain_app.py ...)"


def test_plain_app_runs_without_reliable(env: Path) -> None:
    app = load("plain_app")
    assert not any(isinstance(m, ReliableMiddleware) for m in app.broker.middleware)
    app.send_welcome_email.send(1)
    app.make_thumbnail.send("cat.png", size=64)
    with worker(app.broker) as w:
        app.broker.join("emails")
        app.broker.join("images")
        w.join()
    assert sorted(app.SENT) == ["thumbnail:cat.png:64", "welcome:1"]


def test_reliable_app_jobs_reach_their_states(env: Path) -> None:
    app = load("reliable_app")
    store = middleware_of(app.broker).store
    emails = [app.send_welcome_email.send(user) for user in range(3)]
    thumbnail = app.make_thumbnail.send("cat.png", size=64)
    bad = app.make_thumbnail.send("")
    with worker(app.broker):
        for message in [*emails, thumbnail]:
            wait_status(store, message.message_id, JobStatus.SUCCEEDED)
            assert events(store, message.message_id) == ["enqueued", "claim", "succeed"]
        wait_status(store, bad.message_id, JobStatus.FAILED)
    failed = store.get(bad.message_id)
    assert failed.attempt == 1 and failed.last_error_class == "invalid_input", "bad input fails fast, no retries"
    assert store.get(emails[0].message_id).owner == "team-growth"
    assert sorted(app.SENT) == ["thumbnail:cat.png:64", "welcome:0", "welcome:1", "welcome:2"]


# -- export: checkpoints, operation keys, pause and resume ---------------------------------------


def test_export_pauses_at_a_checkpoint_and_resumes_from_it(env: Path) -> None:
    export = load("export_job")
    store = middleware_of(export.broker).store
    fetched: list[int] = []
    at_page_3, go_on = threading.Event(), threading.Event()
    real_fetch = export.fetch_page

    def fetch(account_id: str, page: int) -> list[dict[str, Any]]:
        fetched.append(page)
        if page == 3 and not go_on.is_set():
            at_page_3.set()
            go_on.wait(10)
        return real_fetch(account_id, page)

    export.fetch_page = fetch
    job_id = export.export_account.send("acme", 6).message_id
    with worker(export.broker):
        assert at_page_3.wait(10)
        paused = Control(store).pause(job_id, reason="test")
        assert paused.outcome == "requested"
        go_on.set()
        wait_status(store, job_id, JobStatus.PAUSED)
        assert store.get(job_id).checkpoint == {"next_page": 4, "rows": 40}, "page 3 finished, then paused"

        control = Control(store, policy=Policy.load(EXAMPLES / "policies"), broker=export.broker)
        assert control.resume(job_id, reason="test").outcome == "done"
        wait_status(store, job_id, JobStatus.SUCCEEDED)
    job = store.get(job_id)
    assert fetched == [0, 1, 2, 3, 4, 5], "resumed at the checkpoint, no page fetched twice"
    assert job.attempt == 2 and job.checkpoint == {"next_page": 6, "rows": 60}
    history = events(store, job_id)
    assert [e for e in history if e != "checkpoint"] == [
        "enqueued", "claim", "pause_requested", "pause_observed", "resume", "claim", "succeed"]
    effects = store.effects(job_id)
    assert [e.op_key for e in effects] == [f"{job_id}:{page}" for page in range(6)]
    assert all(e.duplicates == 0 for e in effects)
    assert len(list((env / "exports" / "acme").glob("*.json"))) == 6


# -- payment: idempotency key, REVIEW, compensation -----------------------------------------------


@pytest.fixture
def payments(env: Path) -> Iterator[tuple[ModuleType, Any]]:
    payment = load("payment_job")
    fake_api = load("fake_api")
    api = fake_api.FakeApi()
    payment.shared.client = httpx.Client(base_url="http://provider.test", transport=api.transport())
    yield payment, api


def test_payment_charges_once_with_the_operation_key(payments: tuple[ModuleType, Any]) -> None:
    payment, api = payments
    store = middleware_of(payment.broker).store
    job_id = payment.charge_card.send("order-1", 4200).message_id
    with worker(payment.broker):
        wait_status(store, job_id, JobStatus.SUCCEEDED)
    assert list(api.charges) == [f"{job_id}:charge"], "the provider saw the job's operation key"
    assert api.receipts == ["order-1"]
    assert [e.op_key for e in store.effects(job_id)] == [f"{job_id}:charge"]


def test_declined_card_fails_at_once(payments: tuple[ModuleType, Any]) -> None:
    payment, api = payments
    store = middleware_of(payment.broker).store
    job_id = payment.charge_card.send("order-2", 500_000).message_id
    with worker(payment.broker):
        wait_status(store, job_id, JobStatus.FAILED)
    job = store.get(job_id)
    assert job.attempt == 1 and job.last_error_class == "invalid_input" and not api.charges


def test_payment_read_timeout_goes_to_review(payments: tuple[ModuleType, Any]) -> None:
    payment, _api = payments
    store = middleware_of(payment.broker).store

    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no answer from the provider", request=request)

    payment.shared.client = httpx.Client(base_url="http://provider.test", transport=httpx.MockTransport(timeout))
    job_id = payment.charge_card.send("order-3", 4200).message_id
    with worker(payment.broker):
        wait_status(store, job_id, JobStatus.REVIEW)
    job = store.get(job_id)
    assert job.attempt == 1 and job.last_error_class == "side_effect_unknown", "never retried blindly"


def test_crashed_payment_goes_to_review_not_retry(payments: tuple[ModuleType, Any]) -> None:
    payment, api = payments
    middleware = middleware_of(payment.broker)
    store = middleware.store
    job_id = payment.charge_card.send("order-4", 4200).message_id
    # A worker claims the job and dies: its lease expires and nobody renews it.
    store.claim(job_id, worker_id="crashed-worker", lease_ttl=0.1)
    expires = store.get(job_id).lease_expires_at
    assert expires is not None
    wait_for(lambda: store.now() > expires, "the database's clock to pass the lease expiry")
    report = Recovery(store, None, middleware.policy).run_once()  # contract travels with the job
    assert report.expired == {job_id: "lease_expired_review"}
    assert store.get(job_id).status is JobStatus.REVIEW
    with worker(payment.broker) as w:  # the original message is still queued: its claim is refused
        payment.broker.join("payments", fail_fast=False)
        w.join()
    assert store.get(job_id).status is JobStatus.REVIEW and not api.charges
    assert events(store, job_id)[-1] == "claim_refused"


def test_cancel_after_the_charge_runs_the_refund(payments: tuple[ModuleType, Any]) -> None:
    payment, api = payments
    store = middleware_of(payment.broker).store
    charged, go_on = threading.Event(), threading.Event()
    transport = api.transport()

    def slow_provider(request: httpx.Request) -> httpx.Response:
        response = transport.handle_request(request)
        if request.url.path == "/charges":
            charged.set()
            go_on.wait(10)
        return response

    payment.shared.client = httpx.Client(base_url="http://provider.test", transport=httpx.MockTransport(slow_provider))
    job_id = payment.charge_card.send("order-5", 4200).message_id
    with worker(payment.broker) as w:
        assert charged.wait(10)
        control = Control(store, policy=Policy.load(EXAMPLES / "policies"), broker=payment.broker)
        assert control.cancel(job_id, reason="customer withdrew the order").outcome == "requested"
        go_on.set()
        wait_status(store, job_id, JobStatus.CANCELLED)
        wait_for(lambda: api.refunds != {}, "the refund")
        payment.broker.join("payments", fail_fast=False)
        w.join()
    history = events(store, job_id)
    assert {"cancel_requested", "cancel_observed", "compensation_enqueued"} <= set(history)
    assert list(api.refunds) == [f"refund:{job_id}:charge"]
    assert api.charges[f"{job_id}:charge"]["refunded"] and api.receipts == []
    refunds = store.list_jobs(queue="payments", status=[JobStatus.SUCCEEDED])
    assert [(j.actor, j.message["args"]) for j in refunds] == [("refund_charge", [job_id])]


# -- HTTP: 429 + Retry-After classified by the policy ---------------------------------------------


def test_http_job_honours_429_and_continues_from_its_cursor(env: Path) -> None:
    http = load("http_job")
    fake_api = load("fake_api")
    store = middleware_of(http.broker).store
    api = fake_api.FakeApi(pages=4, throttle_every=3, retry_after=0)  # the 3rd request gets a 429
    http.shared.client = httpx.Client(base_url="http://partner.test", transport=api.transport())
    job_id = http.sync_contacts.send("acme").message_id
    with worker(http.broker):
        wait_status(store, job_id, JobStatus.SUCCEEDED)
    job = store.get(job_id)
    assert job.attempt == 2 and job.retry_count == 1
    retries = [e for e in store.events(job_id) if e.event == "retry_scheduled"]
    assert len(retries) == 1 and retries[0].error_class == "rate_limited" and retries[0].detail["rate_limited"]
    assert retries[0].detail["rule"].endswith("(throttled)"), "classified by policies/examples/http_api.yaml"
    assert [e.op_key for e in store.effects(job_id)] == [f"{job_id}:{page}" for page in range(4)]
    assert len(http.CONTACTS) == 12
    assert [path for _, path in api.requests] == ["/contacts"] * 5, "pages 0, 1, 2 (429), 2, 3"


# -- policies and alert rules are valid -----------------------------------------------------------


def test_example_policies_and_alert_rules_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    runner = CliRunner()
    policy = runner.invoke(cli, ["policy", "check", "examples/policies/"])
    assert policy.exit_code == 0 and policy.output.startswith("OK:"), policy.output
    alerts = runner.invoke(cli, ["alerts", "check", "examples/alert_rules/"])
    assert alerts.exit_code == 0 and alerts.output.startswith("OK:"), alerts.output


# -- an app's own tests with reliable.testing ----------------------------------------------------


def test_the_example_app_tests_pass_with_reliable_testing() -> None:
    """examples/test_reliable_app.py is what an app's tests look like: run as an app would run them."""
    result = subprocess.run([sys.executable, "-m", "pytest", "examples/test_reliable_app.py", "-q", "-p", "no:randomly",
                             "-p", "no:cacheprovider", "-p", "no:xdist"], cwd=REPO, capture_output=True, text=True,
                            check=False, timeout=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "4 passed" in result.stdout
