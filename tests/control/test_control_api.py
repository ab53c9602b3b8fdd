"""The control API against a real store on SQLite and PostgreSQL: each command, CAS, audit, authorization."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from control_helpers import ACTOR, QUEUE, ended, make, paused, running
from dramatiq.brokers.stub import StubBroker

from reliable.control import Control
from reliable.errors import ConfigError, ControlRefused, JobNotFound, ReasonRequired
from reliable.operators import Operator, OperatorsPolicy
from reliable.states import Event, JobStatus
from reliable.store import StateStore
from reliable.store.selection import JobFilter, Reader, count_jobs, select_jobs

ALICE = Operator("alice", "ops-box", "test")
RESUMABLE = {ACTOR: {"resumable": True, "checkpoint_schema": 2}}


@pytest.fixture
def control(store: StateStore) -> Control:
    return Control(store, identity=ALICE, actor_options=RESUMABLE)


def last(store: StateStore, job_id: str, event: str | None = None):  # type: ignore[no-untyped-def]
    events = [e for e in store.events(job_id) if event is None or e.event == event]
    assert events, f"no {event} event on {job_id}"
    return events[-1]


# -- pause ---------------------------------------------------------------------------------------


def test_pause_pending_is_immediate_and_audited(store: StateStore, control: Control) -> None:
    make(store, "j")
    result = control.pause("j", reason="downstream maintenance")
    assert result.outcome == "done" and result.job is not None and result.job.status is JobStatus.PAUSED
    event = last(store, "j")
    assert (event.event, event.operator, event.reason) == ("pause", "alice", "downstream maintenance")
    assert event.host and event.detail["host"] == "ops-box" and event.detail["command"] == "pause"


def test_pause_retry_wait_is_immediate(store: StateStore, control: Control) -> None:
    ended(store, "j", Event.RETRY)
    assert control.pause("j", reason="test").job.status is JobStatus.PAUSED  # type: ignore[union-attr]


def test_pause_running_sets_the_flag_for_the_worker(store: StateStore, control: Control) -> None:
    running(store, "j")
    result = control.pause("j", reason="db failover")
    assert result.outcome == "requested" and result.event == "pause_requested"
    job = store.get("j")
    assert job.status is JobStatus.RUNNING and job.pause_requested and job.lease_id == 1


def test_pause_of_a_finished_job_is_refused_and_audited(store: StateStore, control: Control) -> None:
    ended(store, "j", Event.FAIL)
    with pytest.raises(ControlRefused, match="cannot pause a FAILED job"):
        control.pause("j", reason="test")
    event = last(store, "j")
    assert event.event == "command_refused" and event.operator == "alice" and event.detail["command"] == "pause"
    assert event.host == "ops-box"


def test_unknown_job(control: Control) -> None:
    with pytest.raises(JobNotFound):
        control.pause("nope", reason="test")


# -- stop ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["pause", "stop", "cancel", "resume", "restart", "requeue", "reconcile",
                                     "discard"])
@pytest.mark.parametrize("reason", [None, "   "])
def test_every_command_needs_a_reason_and_a_missing_one_writes_nothing(
        store: StateStore, control: Control, command: str, reason: str | None) -> None:
    ended(store, "j", Event.NEED_REVIEW)
    before = store.events("j")
    extra = {"resolution": "succeeded"} if command == "reconcile" else {}
    for dry_run in (False, True):
        with pytest.raises(ReasonRequired, match=f"{command} needs a reason") as raised:
            getattr(control, command)("j", reason=reason, dry_run=dry_run, **extra)
        assert raised.value.command == command and isinstance(raised.value, ConfigError)
    with pytest.raises(ReasonRequired):
        control.run_bulk(command, [store.get("j")], reason=reason, **extra)
    with pytest.raises(ReasonRequired):  # before looking the job up: bad input first, whatever the job
        getattr(control, command)("no-such-job", reason=reason, **extra)
    assert store.events("j") == before and store.get("j").status is JobStatus.REVIEW


@pytest.mark.parametrize("setup", ["pending", "paused"])
def test_stop_not_running_is_immediate(store: StateStore, control: Control, setup: str) -> None:
    make(store, "j") if setup == "pending" else paused(store, "j")
    assert control.stop("j", reason="r").job.status is JobStatus.STOPPED  # type: ignore[union-attr]


def test_stop_running_moves_to_stopping_with_db_time(store: StateStore, control: Control) -> None:
    running(store, "j")
    before = store.now()
    result = control.stop("j", reason="runaway")
    job = store.get("j")
    assert result.outcome == "requested" and job.status is JobStatus.STOPPING and job.stop_requested
    assert job.stop_requested_at is not None and before - 1 <= job.stop_requested_at <= store.now() + 1


# -- cancel --------------------------------------------------------------------------------------


def test_cancel_pending(store: StateStore, control: Control) -> None:
    make(store, "j")
    result = control.cancel("j", reason="withdrawn")
    assert result.job.status is JobStatus.CANCELLED and not result.warnings  # type: ignore[union-attr]


def test_cancel_running_and_upgrade_of_a_stop(store: StateStore, control: Control) -> None:
    running(store, "a")
    control.cancel("a", reason="r")
    job = store.get("a")
    assert job.status is JobStatus.STOPPING and job.cancel_requested and job.stop_requested_at is not None
    running(store, "b")
    control.stop("b", reason="r")
    first = store.get("b").stop_requested_at
    result = control.cancel("b", reason="actually cancel")
    job = store.get("b")
    assert result.event == "cancel_requested" and job.cancel_requested and job.stop_requested_at == first


def test_cancel_with_effects_enqueues_the_compensation(store: StateStore) -> None:
    broker = StubBroker()
    control = Control(store, identity=ALICE, broker=broker,
                      actor_options={ACTOR: {"compensation": "undo_export"}})
    ended(store, "j", Event.RETRY, effects=2)
    result = control.cancel("j", reason="customer withdrew")
    assert result.compensation == "undo_export" and result.job.status is JobStatus.CANCELLED  # type: ignore[union-attr]
    [raw] = list(broker.queues[QUEUE].queue)
    import dramatiq

    message = dramatiq.Message.decode(raw)
    assert (message.actor_name, message.args, message.queue_name) == ("undo_export", ("j",), QUEUE)
    event = last(store, "j", "compensation_enqueued")
    assert event.detail["actor"] == "undo_export" and event.operator == "alice"


def test_cancel_with_effects_without_broker_records_pending_compensation(store: StateStore) -> None:
    control = Control(store, identity=ALICE, actor_options={ACTOR: {"compensation": "undo_export"}})
    paused(store, "j", effects=1)
    result = control.cancel("j", reason="r")
    assert any("pending" in w for w in result.warnings)
    assert last(store, "j", "compensation_pending").detail["actor"] == "undo_export"


def test_cancel_with_effects_and_no_compensation_says_effects_remain(store: StateStore, control: Control) -> None:
    paused(store, "j", effects=3)
    result = control.cancel("j", reason="r")
    assert result.job.status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert any("partial side effects remain" in w for w in result.warnings)
    assert last(store, "j", "cancel").detail["partial_effects_remain"] is True
    assert last(store, "j", "partial_effects_remain").detail["effects"] == 3


# -- resume --------------------------------------------------------------------------------------


def test_resume_keeps_job_checkpoint_and_history(store: StateStore, control: Control) -> None:
    paused(store, "j", checkpoint={"page": 7})
    before = store.get("j")
    result = control.resume("j", reason="maintenance over")
    job = store.get("j")
    assert result.outcome == "done" and job.status is JobStatus.PENDING
    assert job.checkpoint == {"page": 7} and job.checkpoint_version == before.checkpoint_version
    assert job.attempt == 1 and len(store.attempts("j")) == 1 and job.dispatched_at is None
    assert not result.dispatched


def test_resume_with_a_broker_dispatches_the_stored_message(store: StateStore) -> None:
    broker = StubBroker()
    control = Control(store, identity=ALICE, broker=broker, actor_options=RESUMABLE)
    paused(store, "j")
    result = control.resume("j", reason="test")
    assert result.dispatched and store.get("j").dispatched_at is not None
    import dramatiq

    [raw] = list(broker.queues[QUEUE].queue)
    message = dramatiq.Message.decode(raw)
    assert message.message_id == "j" and message.actor_name == ACTOR and message.args == ("j",)


def test_resume_refused_when_not_resumable(store: StateStore) -> None:
    control = Control(store, identity=ALICE)
    paused(store, "j")
    with pytest.raises(ControlRefused, match=r"not resumable.*reliable restart j"):
        control.resume("j", reason="test")
    assert store.get("j").status is JobStatus.PAUSED
    assert last(store, "j").event == "command_refused"


def test_resume_refused_on_incompatible_checkpoint_schema(store: StateStore) -> None:
    control = Control(store, identity=ALICE, actor_options={ACTOR: {"resumable": True, "checkpoint_schema": 3}})
    paused(store, "j", schema=2)
    with pytest.raises(ControlRefused, match="schema 2 but actor 'export' now expects 3"):
        control.resume("j", reason="test")
    assert store.get("j").status is JobStatus.PAUSED


def test_resume_validator(store: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_validators.py").write_text(
        "def ok(job):\n    return True\n\n"
        "def gone(job):\n    raise LookupError(f'input of {job.job_id} was deleted')\n\n"
        "def no(job):\n    return False\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, expect in (("gone", "input of a was deleted"), ("no", "refused the resume"),
                         ("missing", "cannot be imported")):
        control = Control(store, identity=ALICE, actor_options={
            ACTOR: {"resumable": True, "checkpoint_schema": 2, "resume_validator": f"my_validators:{name}"}})
        if store.find("a") is None:
            paused(store, "a")
        with pytest.raises(ControlRefused, match=expect):
            control.resume("a", reason="test")
    control = Control(store, identity=ALICE, actor_options={
        ACTOR: {"resumable": True, "checkpoint_schema": 2, "resume_validator": "my_validators:ok"}})
    assert control.resume("a", reason="test").job.status is JobStatus.PENDING  # type: ignore[union-attr]


def race_resumes(store_url: str, job_id: str, contenders: int) -> list[str]:
    """`contenders` threads, each with its own store connection, resume `job_id` at the same instant."""
    barrier = threading.Barrier(contenders)
    outcomes: list[str] = []
    lock = threading.Lock()

    def contender(index: int) -> None:
        own = StateStore(store_url, max_connections=1)
        control = Control(own, identity=Operator(f"op{index}", "h", "test"), actor_options=RESUMABLE)
        barrier.wait()
        try:
            control.resume(job_id, reason="test")
            outcome = "won"
        except ControlRefused as exc:
            outcome = "refused: " + str(exc)
        with lock:
            outcomes.append(outcome)
        own.close()

    threads = [threading.Thread(target=contender, args=(i,)) for i in range(contenders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return outcomes


def test_two_racing_resumes_exactly_one_wins(store: StateStore, store_url: str) -> None:
    for race in range(5):
        job_id = f"r{race}"
        paused(store, job_id)
        outcomes = race_resumes(store_url, job_id, 2 + race % 3)
        assert outcomes.count("won") == 1, outcomes
        assert all("cannot resume a PENDING job" in o for o in outcomes if o != "won"), outcomes
        assert store.get(job_id).status is JobStatus.PENDING
        assert [e.event for e in store.events(job_id)].count("resume") == 1


# -- restart, requeue, reconcile, discard --------------------------------------------------------


def test_restart_clears_checkpoint_keeps_checkpoint_version(store: StateStore, control: Control) -> None:
    ended(store, "j", Event.FAIL, checkpoint=5)
    before = store.get("j")
    result = control.restart("j", reason="input fixed")
    job = store.get("j")
    assert result.outcome == "done" and job.status is JobStatus.PENDING and job.checkpoint is None
    assert job.checkpoint_version == before.checkpoint_version == 1 and job.retry_count == 0


@pytest.mark.parametrize("event", [Event.DEAD_LETTER, Event.NEED_REVIEW])
def test_restart_from_dead_and_review(store: StateStore, control: Control, event: Event) -> None:
    ended(store, "j", event)
    assert control.restart("j", reason="r").job.status is JobStatus.PENDING  # type: ignore[union-attr]


def test_requeue_keeps_checkpoint_and_resets_retries(store: StateStore, control: Control) -> None:
    ended(store, "j", Event.DEAD_LETTER, checkpoint=4)
    result = control.requeue("j", reason="test")
    job = store.get("j")
    assert result.event == "requeue" and job.status is JobStatus.PENDING and job.checkpoint == 4
    assert job.retry_count == 0
    make(store, "p")
    with pytest.raises(ControlRefused, match="cannot requeue a PENDING job"):
        control.requeue("p", reason="test")


def test_requeue_refused_on_incompatible_checkpoint(store: StateStore) -> None:
    control = Control(store, identity=ALICE, actor_options={ACTOR: {"checkpoint_schema": 9}})
    ended(store, "j", Event.FAIL, checkpoint=4)
    with pytest.raises(ControlRefused, match="reliable restart j"):
        control.requeue("j", reason="test")


@pytest.mark.parametrize(("resolution", "status"), [("succeeded", JobStatus.SUCCEEDED),
                                                     ("cancelled", JobStatus.CANCELLED)])
def test_reconcile(store: StateStore, control: Control, resolution: str, status: JobStatus) -> None:
    ended(store, "j", Event.NEED_REVIEW)
    result = control.reconcile("j", resolution=resolution, reason="checked the PSP")
    assert result.job.status is status  # type: ignore[union-attr]
    assert last(store, "j").detail["resolution"] == resolution
    with pytest.raises(ControlRefused, match="only REVIEW jobs"):
        control.reconcile("j", resolution=resolution, reason="again")


def test_discard_hides_from_the_dead_letters_until_it_dies_again(store: StateStore, control: Control) -> None:
    ended(store, "j", Event.DEAD_LETTER)
    dlq = JobFilter(statuses=(JobStatus.DEAD,), exclude_discarded=True)
    assert [j.job_id for j in select_jobs(store, dlq, reader=Reader.trusted())] == ["j"]
    control.discard("j", reason="duplicate order")
    everything = Reader.trusted()
    assert select_jobs(store, dlq, reader=everything) == [] and count_jobs(store, dlq, reader=everything) == 0
    assert store.get("j").status is JobStatus.DEAD
    control.requeue("j", reason="test")
    claim = store.claim("j", worker_id="w", lease_ttl=30)
    store.finish("j", claim.lease_id, Event.DEAD_LETTER)
    assert [j.job_id for j in select_jobs(store, dlq, reader=Reader.trusted())] == ["j"]
    make(store, "p")
    with pytest.raises(ControlRefused, match="needs a DEAD job"):
        control.discard("p", reason="r")


# -- authorization -------------------------------------------------------------------------------

OPERATORS = """\
operators:
  alice: [admin]
  "bob*": [support]
roles:
  admin:
    - {commands: ["*"], queues: ["*"]}
  support:
    - {commands: [pause, retry], queues: ["exp*"]}
"""


def test_authorization_refusal_is_audited(store: StateStore) -> None:
    policy = OperatorsPolicy.parse(OPERATORS, path="operators.yaml")
    bob = Control(store, identity=Operator("bobby", "laptop", "test"), operators=policy, actor_options=RESUMABLE)
    make(store, "j")
    make(store, "other", queue="billing")
    assert bob.pause("j", reason="test").job.status is JobStatus.PAUSED  # type: ignore[union-attr]
    with pytest.raises(ControlRefused, match=r"operator 'bobby' .*support.* may not resume jobs on queue 'exports'"):
        bob.resume("j", reason="test")
    with pytest.raises(ControlRefused, match="may not pause jobs on queue 'billing'"):
        bob.pause("other", reason="test")
    event = last(store, "j")
    assert (event.event, event.operator, event.host) == ("command_refused", "bobby", "laptop")
    assert store.get("j").status is JobStatus.PAUSED
    eve = Control(store, identity=Operator("eve", "h", "test"), operators=policy)
    with pytest.raises(ControlRefused, match="no role"):
        eve.pause("other", reason="test")
    admin = bob.as_operator(Operator("alice", "h", "api"))
    assert admin.resume("j", reason="test").job.status is JobStatus.PENDING  # type: ignore[union-attr]


# -- bulk ----------------------------------------------------------------------------------------


def test_bulk_limit_dry_run_and_progress(store: StateStore, control: Control) -> None:
    for i in range(6):
        make(store, f"j{i}")
    make(store, "elsewhere", queue="billing")
    jobs = control.select(JobFilter(queue=QUEUE, statuses=(JobStatus.PENDING,)), limit=None)
    assert len(jobs) == 6
    versions = {j.job_id: j.version for j in jobs}
    events_before = sum(len(store.events(j.job_id)) for j in jobs)
    dry = control.run_bulk("pause", jobs, reason="test", limit=4, dry_run=True)
    assert dry.count("dry_run") == 4 and dry.skipped == 2
    assert {j.job_id: j.version for j in control.select(JobFilter(queue=QUEUE), limit=None)} == versions
    assert sum(len(store.events(j.job_id)) for j in jobs) == events_before
    seen: list[tuple[int, int]] = []
    report = control.run_bulk("pause", jobs, reason="test", limit=4, progress=lambda d, t, r: seen.append((d, t)))
    assert report.count("done") == 4 and seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert store.count_by_status()[JobStatus.PAUSED] == 4
    report = control.run_bulk("pause", jobs, reason="test", limit=100)
    assert report.count("done") == 2 and report.refused == 4  # already paused: refused, run continued


def test_bulk_rate_with_an_injected_clock(store: StateStore, control: Control) -> None:
    for i in range(5):
        ended(store, f"d{i}", Event.DEAD_LETTER)
    now = [0.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds

    jobs = control.select(JobFilter(statuses=(JobStatus.DEAD,)))
    report = control.run_bulk("requeue", jobs, reason="API is back", rate=2.0, clock=lambda: now[0], sleep=sleep)
    assert report.count("done") == 5
    assert sum(sleeps) == pytest.approx(2.0)  # first token free, then one every 0.5 s
    assert all(store.get(j.job_id).status is JobStatus.PENDING for j in jobs)


def test_select_filters(store: StateStore, control: Control) -> None:
    ended(store, "f", Event.FAIL)
    ended(store, "d", Event.DEAD_LETTER, queue="billing", actor="charge")
    make(store, "p")
    assert [j.job_id for j in control.select(JobFilter(error_class="transient"))] == ["f", "d"]
    assert [j.job_id for j in control.select(JobFilter(actor="charge"))] == ["d"]
    assert [j.job_id for j in control.select(JobFilter(job_ids=("p", "f"), queue=QUEUE))] == ["f", "p"]
    assert control.select(JobFilter(older_than=3600)) == []
    assert len(control.select(JobFilter(older_than=0))) == 3
