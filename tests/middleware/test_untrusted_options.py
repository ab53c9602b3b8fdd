"""A producer cannot choose code or loosen a job's contract through the options of its message.

Contract options and options naming code come from the actor's declaration and the policy only.
A message carrying them has them removed at registration (from the stored and the published
message) and an `untrusted_options_ignored` event names them; the worker, the recovery loop and
`Control` all decide with the declared contract.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from prometheus_client import REGISTRY

import reliable
from reliable.control import Control
from reliable.errors import ControlRefused
from reliable.options import OWN_QUEUE, STORED_CONTRACT, UNTRUSTED_IN_MESSAGE
from reliable.policy import JobContract
from reliable.recovery import Recovery
from reliable.states import Event, JobStatus
from reliable.store import Job, StateStore

from support import wait_for

Harness = Any

#: What a producer tries, per forbidden option (each differs from the declaration below).
FORBIDDEN: dict[str, Any] = {
    "reliable": False,
    "owner": "mallory",
    "idempotent": True,
    "resumable": True,
    "checkpoint_schema": 99,
    "stop_grace": 3600,
    "compensation": "evil_compensation",
    "retry_on_crash": True,
    "resume_validator": "sidefx_probe:check",
    "max_attempts": 50,
    "checkpoint_codec": "sidefx_probe:check",
    "fast_path": True,
    OWN_QUEUE: "other",  # another queue's contract (and the rights on it)
    STORED_CONTRACT: {"idempotent": True, "resumable": True, "retry_on_crash": True, "max_attempts": 50,
                      "resume_validator": "sidefx_probe:check", "compensation": "evil_compensation"},
}

DECLARED: dict[str, Any] = {"owner": "team-data", "idempotent": False, "resumable": False, "checkpoint_schema": 2,
                            "stop_grace": 5, "max_attempts": 1, "retry_on_crash": False}

SIDE_EFFECT_MODULE = """\
from pathlib import Path
Path(__file__).with_suffix(".imported").write_text("imported")

def check(job):
    return False
"""


def ignored_events(store: StateStore, job_id: str) -> list[Any]:
    return [e for e in store.events(job_id) if e.event == "untrusted_options_ignored"]


def paused(store: StateStore, job_id: str, *, effects: int = 0) -> Job:
    """Run the registered job's first attempt by hand (effects, a checkpoint) and pause it."""
    claim = store.claim(job_id, worker_id="w1", lease_ttl=60)
    store.save_checkpoint(job_id, claim.lease_id, 3, lease_ttl=60)
    for i in range(effects):
        store.record_effect(job_id, claim.lease_id, f"unit-{i}", attempt_id=claim.attempt_id)
    store.finish(job_id, claim.lease_id, Event.PAUSE_OBSERVED, worker_id="w1")
    return store.get(job_id)


@pytest.fixture
def probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A module `sidefx_probe` whose import leaves a file behind; the path of that file."""
    (tmp_path / "sidefx_probe.py").write_text(SIDE_EFFECT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "sidefx_probe", raising=False)
    return tmp_path / "sidefx_probe.imported"


def test_every_forbidden_option_is_tested() -> None:
    assert set(FORBIDDEN) == UNTRUSTED_IN_MESSAGE


@pytest.mark.parametrize("option", sorted(FORBIDDEN))
def test_message_option_is_ignored_by_worker_recovery_and_control(
        option: str, harness: Harness, probe: Path, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[JobContract] = []

    @dramatiq.actor(**DECLARED)
    def guarded() -> None:
        seen.append(reliable.current_job().contract)

    message = guarded.send_with_options(**{option: FORBIDDEN[option]})
    assert option not in message.options  # not even published
    harness.worker.start()
    harness.join()
    store, policy = harness.store, harness.middleware.policy
    declared = harness.middleware.contract_for("guarded", "default")
    job = store.get(message.message_id)

    # The worker tracked it and ran it under the declared contract.
    assert seen == [declared]
    assert job.status is JobStatus.SUCCEEDED
    assert (job.owner, job.checkpoint_schema) == ("team-data", 2)
    # The stored message keeps only what the actor declared.
    options = job.message["options"]
    assert options[STORED_CONTRACT] == DECLARED
    if option != STORED_CONTRACT:
        assert option not in options
    # A recovery loop that does not import the actor decides with the declared contract.
    assert Recovery(store, None, policy).contract_of(job) == declared
    # So does Control, with the policy and without it.
    for control in (Control(store, policy=policy), Control(store)):
        contract = control.contract_for(job)
        assert (contract.resumable, contract.checkpoint_schema, contract.compensation, contract.idempotent,
                contract.resume_validator) == (False, 2, None, False, None)
    assert not probe.exists()
    # Recorded on the job, by name (values may be code paths: never recorded).
    [event] = ignored_events(store, job.job_id)
    assert event.detail == {"options": [option]}
    assert "sidefx_probe" not in json.dumps(event.detail) + caplog.text
    assert f"message options {option} ignored" in caplog.text


def test_forged_stored_contract_is_dropped_when_the_actor_declares_none(harness: Harness) -> None:
    @dramatiq.actor
    def plain() -> None:
        pass

    message = plain.send_with_options(**{STORED_CONTRACT: FORBIDDEN[STORED_CONTRACT]})
    store, policy = harness.store, harness.middleware.policy
    job = paused(store, message.message_id)
    assert STORED_CONTRACT not in job.message["options"]
    assert Recovery(store, None, policy).contract_of(job) == policy.contract("plain", "default")
    with pytest.raises(ControlRefused, match="not resumable"):
        Control(store, policy=policy).resume(job.job_id, reason="test")
    assert [e.detail for e in ignored_events(store, job.job_id)] == [{"options": [STORED_CONTRACT]}]


@pytest.mark.parametrize("use_policy", [True, False])
def test_resume_refuses_a_non_resumable_actor_even_when_the_message_says_resumable(
        harness: Harness, use_policy: bool) -> None:
    @dramatiq.actor(checkpoint_schema=2)
    def export() -> None:
        pass

    message = export.send_with_options(resumable=True, checkpoint_schema=2)
    store = harness.store
    job = paused(store, message.message_id)
    control = Control(store, policy=harness.middleware.policy if use_policy else None)
    with pytest.raises(ControlRefused, match=f"actor 'export' is not resumable.*reliable restart {job.job_id}"):
        control.resume(job.job_id, reason="test")
    assert store.get(job.job_id).status is JobStatus.PAUSED


@pytest.mark.parametrize("validator", ["sidefx_probe:check", "this:s"])
def test_a_message_resume_validator_is_never_imported(harness: Harness, probe: Path, validator: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    module = validator.partition(":")[0]
    if module == "this" and "this" in sys.modules:
        pytest.skip("the standard library's `this` was imported earlier in this process")

    @dramatiq.actor(resumable=True, checkpoint_schema=2)
    def export() -> None:
        pass

    message = export.send_with_options(resume_validator=validator)
    store = harness.store
    job = paused(store, message.message_id)
    result = Control(store, policy=harness.middleware.policy).resume(job.job_id, reason="test")
    assert result.job is not None and result.job.status is JobStatus.PENDING
    assert module not in sys.modules and not probe.exists()
    assert "Beautiful is better than ugly" not in capsys.readouterr().out


def test_a_declared_resume_validator_is_imported_and_called(harness: Harness, probe: Path) -> None:
    """The probe above can see an import: the validator the actor declares does run."""
    @dramatiq.actor(resumable=True, checkpoint_schema=2, resume_validator="sidefx_probe:check")
    def export() -> None:
        pass

    job = paused(harness.store, export.send().message_id)
    with pytest.raises(ControlRefused, match="resume validator sidefx_probe:check refused"):
        Control(harness.store, policy=harness.middleware.policy).resume(job.job_id, reason="test")
    assert probe.exists()


@pytest.mark.parametrize("declared", [None, "refund"])
def test_a_message_compensation_is_never_enqueued(harness: Harness, declared: str | None) -> None:
    @dramatiq.actor
    def evil_compensation(job_id: str) -> None:
        pass

    @dramatiq.actor
    def refund(job_id: str) -> None:
        pass

    @dramatiq.actor(**({"compensation": declared} if declared else {}))
    def charge() -> None:
        pass

    store, policy, broker = harness.store, harness.middleware.policy, harness.broker
    # An operator cancels a paused job that applied effects.
    paused_job = paused(store, charge.send_with_options(compensation="evil_compensation").message_id, effects=1)
    Control(store, policy=policy, broker=broker).cancel(paused_job.job_id, reason="customer withdrew")
    # Recovery completes a cancel whose worker died (lease expired while STOPPING).
    running_id = charge.send_with_options(compensation="evil_compensation").message_id
    claim = store.claim(running_id, worker_id="w-dead", lease_ttl=1.0)
    store.record_effect(running_id, claim.lease_id, "unit-0", attempt_id=claim.attempt_id)
    Control(store, policy=policy).cancel(running_id, reason="customer withdrew")
    wait_for(lambda: any(j.job_id == running_id for j in store.expired_leases()), "the lease to expire", timeout=10)
    Recovery(store, broker, policy).run_once()

    for job_id in (paused_job.job_id, running_id):
        assert store.get(job_id).status is JobStatus.CANCELLED
        events = {e.event: e for e in store.events(job_id)}
        if declared:
            assert events["compensation_enqueued"].detail["actor"] == "refund"
        else:
            assert "compensation_enqueued" not in events and "partial_effects_remain" in events
    # (the sweeper in the recovery pass may publish a job twice: count jobs, not messages)
    queued = {(m.actor_name, m.message_id) for m in map(dramatiq.Message.decode, list(broker.queues["default"].queue))}
    assert not any(actor == "evil_compensation" for actor, _ in queued)
    assert sum(actor == "refund" for actor, _ in queued) == (2 if declared else 0)


@pytest.mark.parametrize(("idempotent", "expected"), [(False, JobStatus.REVIEW), (True, JobStatus.PENDING)])
def test_recovery_decides_a_crash_with_the_declared_contract(harness: Harness, idempotent: bool,
                                                           expected: JobStatus) -> None:
    @dramatiq.actor(idempotent=idempotent)
    def charge() -> None:
        pass

    message = charge.send_with_options(idempotent=not idempotent, retry_on_crash=not idempotent)
    store = harness.store
    store.claim(message.message_id, worker_id="w-dead", lease_ttl=0.05)
    wait_for(lambda: any(j.job_id == message.message_id for j in store.expired_leases()), "the lease to expire",
             timeout=10)
    report = Recovery(store, None, harness.middleware.policy).run_once()
    assert store.get(message.message_id).status is expected
    assert report.expired[message.message_id] == ("lease_expired_review" if expected is JobStatus.REVIEW
                                                  else "lease_expired")


def test_worker_decides_failures_with_the_declared_contract(harness: Harness) -> None:
    @dramatiq.actor(idempotent=False)
    def charge() -> None:
        raise RuntimeError("card network answered nothing")

    @dramatiq.actor(max_attempts=1)
    def sync() -> None:
        raise TimeoutError("upstream slow")

    ambiguous = charge.send_with_options(idempotent=True, retry_on_crash=True)
    transient = sync.send_with_options(max_attempts=50)
    harness.worker.start()
    harness.join()
    assert harness.store.get(ambiguous.message_id).status is JobStatus.REVIEW
    dead = harness.store.get(transient.message_id)
    assert (dead.status, dead.attempt) == (JobStatus.DEAD, 1)


def test_a_message_from_a_producer_without_the_middleware_is_cleaned_when_the_worker_registers_it(
        harness: Harness, probe: Path) -> None:
    @dramatiq.actor(checkpoint_schema=2)
    def export() -> None:
        pass

    message = export.message_with_options(resumable=True, resume_validator="sidefx_probe:check")
    harness.broker.queues["default"].put(message.encode())  # published without before_enqueue
    harness.worker.start()
    harness.join()
    job = harness.store.get(message.message_id)
    assert job.status is JobStatus.SUCCEEDED
    assert {"resumable", "resume_validator"}.isdisjoint(job.message["options"])
    assert [e.detail for e in ignored_events(harness.store, job.job_id)] == [
        {"options": ["resumable", "resume_validator"]}]
    assert not Control(harness.store, policy=harness.middleware.policy).contract_for(job).resumable
    assert not probe.exists()


def test_enqueue_many_records_the_ignored_options(harness: Harness) -> None:
    @dramatiq.actor
    def export(n: int) -> None:
        pass

    counted = {"actor": "export", "queue": "default"}
    before = REGISTRY.get_sample_value("reliable_untrusted_options_total", counted) or 0.0
    messages = [export.message_with_options(args=(n,), **({"resumable": True} if n % 2 else {})) for n in range(4)]
    assert harness.middleware.enqueue_many(harness.broker, messages) == 4
    assert REGISTRY.get_sample_value("reliable_untrusted_options_total", counted) == before + 2
    recorded = {m.message_id: [e.detail for e in ignored_events(harness.store, m.message_id)] for m in messages}
    assert recorded == {m.message_id: ([{"options": ["resumable"]}] if n % 2 else []) for n, m in enumerate(messages)}
    assert all("resumable" not in harness.store.get(m.message_id).message["options"] for m in messages)
