"""Bulk operations (reliable.operations) on a real store, SQLite and PostgreSQL: count, confirm, run, cancel."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from control_helpers import ended, make

from reliable.access import role_policy
from reliable.control import Control
from reliable.errors import ConfigError, ControlRefused, NotAuthorized, OperationNotFound, ReasonRequired
from reliable.operations import Operation, Operations
from reliable.operators import Operator, OperatorsPolicy
from reliable.states import Event, JobStatus
from reliable.store import StateStore
from reliable.store.schema import operations
from reliable.store.selection import JobFilter

from support import wait_for

ALICE = Operator("alice", "ops-box", "test")
FAILED = JobFilter(statuses=(JobStatus.FAILED,))


class FakeTime:
    """A clock that only moves when the run sleeps: the rate limit is measured, never waited for."""

    def __init__(self, on_sleep: Callable[[int], None] | None = None) -> None:
        self.now = 1_000.0
        self.slept: list[float] = []
        self.on_sleep = on_sleep

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(len(self.slept))


@pytest.fixture
def fake() -> FakeTime:
    return FakeTime()


@pytest.fixture
def ops(store: StateStore, fake: FakeTime) -> Operations:
    return Operations(store, bulk_rate=100.0, bulk_max=50, clock=fake.clock, sleep=fake.sleep)


@pytest.fixture
def control(store: StateStore) -> Control:
    return Control(store, identity=ALICE)


def as_role(store: StateStore, name: str, role: str, **scope: list[str]) -> Control:
    return Control(store, operators=role_policy(name, role, **scope), identity=Operator(name, "web", "api:token"))


def failed_jobs(store: StateStore, *ids: str, queue: str = "exports") -> None:
    for job_id in ids:
        ended(store, job_id, Event.FAIL, queue=queue)


def finished(ops: Operations, operation_id: str) -> Operation:
    return wait_for(lambda: (op := ops.get(operation_id)).ended and op, f"operation {operation_id} to end",
                    timeout=60)


def test_preview_counts_and_keeps_the_matching_ids(store: StateStore, ops: Operations, control: Control) -> None:
    failed_jobs(store, "f1", "f2", "f3")
    make(store, "p1")
    preview = ops.preview(control, "restart", FAILED, reason="bad deploy fixed")
    op = preview.operation
    assert (op.status, op.total, op.command, op.operator) == ("awaiting_confirmation", 3, "restart", "alice")
    assert sorted(op.job_ids) == ["f1", "f2", "f3"] and op.counts_by_state == {"FAILED": 3}
    assert op.filter == {"statuses": ["FAILED"]} and op.expires_at == pytest.approx(op.created_at + 300)
    assert preview.as_dict()["sample"] == list(op.job_ids) and preview.not_permitted == 0
    with store.read() as conn:
        stored = " ".join(str(v) for v in conn.execute(operations.select()).one())
    assert preview.confirm_token not in stored  # only its hash is kept
    assert all(store.get(j).status is JobStatus.FAILED for j in ("f1", "f2", "f3"))  # nothing acted on yet


def test_the_confirmation_acts_on_exactly_the_counted_jobs(store: StateStore, ops: Operations,
                                                           control: Control) -> None:
    failed_jobs(store, "f1", "f2")
    preview = ops.preview(control, "restart", FAILED, reason="bad deploy fixed")
    failed_jobs(store, "late")  # matches the filter now, but was not counted
    ops.confirm(preview.operation.operation_id, preview.confirm_token, control)
    op = finished(ops, preview.operation.operation_id)
    assert (op.status, op.done, op.counts) == ("finished", 2, {"done": 2})
    assert {r["job_id"] for r in op.results} == {"f1", "f2"} and op.finished_at is not None
    assert store.get("f1").status is JobStatus.PENDING and store.get("late").status is JobStatus.FAILED


def test_every_acted_on_job_is_audited_with_the_operator_reason_and_operation(
        store: StateStore, ops: Operations, control: Control) -> None:
    failed_jobs(store, "f1", "f2")
    preview = ops.preview(control, "restart", FAILED, reason="bad deploy fixed")
    ops.confirm(preview.operation.operation_id, preview.confirm_token, control)
    op = finished(ops, preview.operation.operation_id)
    assert op.confirmed_by == "alice"
    for job_id in ("f1", "f2"):
        event = store.events(job_id)[-1]
        assert (event.event, event.operator, event.reason) == ("restart", "alice", "bad deploy fixed")
        assert event.detail["operation_id"] == op.operation_id


def test_a_job_that_moved_meanwhile_is_refused_and_recorded(store: StateStore, ops: Operations,
                                                            control: Control) -> None:
    failed_jobs(store, "f1", "f2")
    preview = ops.preview(control, "restart", FAILED, reason="bad deploy fixed")
    control.restart("f2", reason="someone was quicker")  # now PENDING: a restart is no longer allowed
    ops.confirm(preview.operation.operation_id, preview.confirm_token, control)
    op = finished(ops, preview.operation.operation_id)
    assert op.counts == {"done": 1, "refused": 1}
    refused = next(r for r in op.results if r["job_id"] == "f2")
    assert refused["outcome"] == "refused" and "cannot restart a PENDING job" in refused["message"]
    event = store.events("f2")[-1]
    assert event.event == "command_refused" and event.detail["operation_id"] == op.operation_id


def test_wrong_expired_and_second_confirmations_are_refused(store: StateStore, ops: Operations,
                                                            control: Control) -> None:
    failed_jobs(store, "f1")
    preview = ops.preview(control, "restart", FAILED, reason="r")
    op_id = preview.operation.operation_id
    with pytest.raises(ControlRefused, match="wrong confirmation token"):
        ops.confirm(op_id, "not-the-token", control)
    ops.confirm(op_id, preview.confirm_token, control)
    with pytest.raises(ControlRefused, match="confirmed already"):
        ops.confirm(op_id, preview.confirm_token, control)
    finished(ops, op_id)

    late = ops.preview(control, "restart", JobFilter(job_ids=("f1",)), reason="r")
    with store.write() as conn:
        conn.execute(operations.update().where(operations.c.operation_id == late.operation.operation_id)
                     .values(expires_at=store.now() - 1))
    with pytest.raises(ControlRefused, match=r"expired.*preview it again"):
        ops.confirm(late.operation.operation_id, late.confirm_token, control)
    assert ops.get(late.operation.operation_id).status == "expired"
    with pytest.raises(OperationNotFound):
        ops.confirm("nope", "x", control)


def test_only_the_creator_or_an_admin_confirms(store: StateStore, ops: Operations, control: Control) -> None:
    failed_jobs(store, "f1")
    preview = ops.preview(control, "restart", FAILED, reason="r")
    bob = control.as_operator(Operator("bob", "web", "api:token"))
    with pytest.raises(NotAuthorized, match="created by 'alice'"):
        ops.confirm(preview.operation.operation_id, preview.confirm_token, bob)
    ops.confirm(preview.operation.operation_id, preview.confirm_token, bob, admin=True)
    assert finished(ops, preview.operation.operation_id).confirmed_by == "bob"
    assert store.events("f1")[-1].operator == "bob"  # the confirmer acts, and is audited


def test_the_run_keeps_to_the_rate(store: StateStore, fake: FakeTime, control: Control) -> None:
    failed_jobs(store, *[f"f{i}" for i in range(5)])
    ops = Operations(store, bulk_rate=10.0, clock=fake.clock, sleep=fake.sleep)
    preview = ops.preview(control, "restart", FAILED, reason="r", rate=2.0)
    ops.confirm(preview.operation.operation_id, preview.confirm_token, control)
    assert finished(ops, preview.operation.operation_id).done == 5
    assert sum(fake.slept) == pytest.approx(2.0)  # the first job at once, then one every 0.5 s
    with pytest.raises(ConfigError, match="at most 10"):
        ops.preview(control, "restart", FAILED, reason="r", rate=50)


def test_cancelling_mid_run_stops_it_with_a_record_of_what_was_done(store: StateStore, control: Control) -> None:
    ids = [f"f{i}" for i in range(6)]
    failed_jobs(store, *ids)
    holder: dict[str, str] = {}
    fake = FakeTime(on_sleep=lambda n: n == 2 and ops.cancel(holder["id"], "alice") and None)
    ops = Operations(store, bulk_rate=1.0, clock=fake.clock, sleep=fake.sleep, flush_every=1)
    preview = ops.preview(control, "restart", FAILED, reason="r")
    holder["id"] = preview.operation.operation_id
    ops.confirm(holder["id"], preview.confirm_token, control)
    op = finished(ops, holder["id"])
    # cancelled while waiting before the 3rd job: that one runs, none after it
    assert (op.status, op.done, op.cancelled_by, op.cancel_requested) == ("cancelled", 3, "alice", True)
    acted = [r["job_id"] for r in op.results]
    assert acted == list(op.job_ids[:3])
    assert [store.get(j).status for j in op.job_ids[3:]] == [JobStatus.FAILED] * 3
    with pytest.raises(ControlRefused, match="nothing to cancel"):
        ops.cancel(holder["id"], "alice")


def test_a_preview_may_be_cancelled_and_then_not_confirmed(store: StateStore, ops: Operations,
                                                           control: Control) -> None:
    failed_jobs(store, "f1")
    preview = ops.preview(control, "restart", FAILED, reason="r")
    with pytest.raises(NotAuthorized):
        ops.cancel(preview.operation.operation_id, "mallory")
    assert ops.cancel(preview.operation.operation_id, "alice").status == "cancelled"
    with pytest.raises(ControlRefused, match="is cancelled"):
        ops.confirm(preview.operation.operation_id, preview.confirm_token, control)


def test_a_viewers_preview_is_refused_and_recorded(store: StateStore, ops: Operations) -> None:
    failed_jobs(store, "f1")
    with pytest.raises(NotAuthorized, match="'vera' may run no command"):
        ops.preview(as_role(store, "vera", "viewer"), "restart", FAILED, reason="curious")
    [op] = ops.recent()
    assert (op.status, op.operator, op.reason, op.total) == ("refused", "vera", "curious", 0)
    assert op.error and "may run no command" in op.error
    assert store.get("f1").status is JobStatus.FAILED


def test_an_operator_scoped_to_billing_counts_only_its_jobs(store: StateStore, ops: Operations) -> None:
    failed_jobs(store, "b1", "b2", queue="billing")
    failed_jobs(store, "e1", queue="exports")
    otto = as_role(store, "otto", "operator", queues=["billing"])
    preview = ops.preview(otto, "restart", FAILED, reason="card processor back")
    assert preview.operation.total == 2 and preview.not_permitted == 0 and "e1" not in preview.operation.job_ids
    ops.confirm(preview.operation.operation_id, preview.confirm_token, otto)
    op = finished(ops, preview.operation.operation_id)
    assert op.counts == {"done": 2}
    assert store.get("e1").status is JobStatus.FAILED and not store.events("e1", events=["command_refused"])
    assert store.get("b1").status is JobStatus.PENDING


def test_the_bulk_limit_counts_only_the_jobs_one_may_act_on(store: StateStore, fake: FakeTime) -> None:
    failed_jobs(store, "e1", "e2", "e3", "e4", queue="exports")
    failed_jobs(store, "b1", "b2", queue="billing")
    ops = Operations(store, bulk_max=3, clock=fake.clock, sleep=fake.sleep)
    otto = as_role(store, "otto", "operator", queues=["billing"])
    preview = ops.preview(otto, "restart", FAILED, reason="r", dry_run=True)  # 6 match, 2 of them otto's
    assert (preview.operation.total, sorted(preview.operation.job_ids)) == (2, ["b1", "b2"])
    olga = as_role(store, "olga", "operator", queues=["exports"])
    with pytest.raises(ConfigError, match="matches 4 jobs, more than one operation may act on \\(3"):
        ops.preview(olga, "restart", FAILED, reason="r")


def test_not_permitted_counts_the_jobs_in_scope_the_command_is_refused_on(store: StateStore,
                                                                         ops: Operations) -> None:
    failed_jobs(store, "b1", "b2", queue="billing")
    failed_jobs(store, "e1", queue="exports")
    policy = OperatorsPolicy.parse("operators: {pat: [pauser]}\n"
                                   "roles: {pauser: [{commands: [pause], queues: [billing]}]}\n")
    pat = Control(store, operators=policy, identity=Operator("pat", "web", "api:proxy"))
    preview = ops.preview(pat, "restart", FAILED, reason="r", dry_run=True)
    assert (preview.operation.total, preview.not_permitted) == (2, 2)  # its jobs, none of them restartable by it


def test_a_search_without_the_right_is_refused_and_recorded_even_dry(store: StateStore, ops: Operations) -> None:
    failed_jobs(store, "b1", queue="billing")
    otto = as_role(store, "otto", "operator", queues=["billing"])
    for dry_run in (True, False):
        with pytest.raises(NotAuthorized, match="'otto' may not search arguments"):
            ops.preview(otto, "restart", JobFilter(search="b1"), reason="guess", dry_run=dry_run)
    assert [(op.status, op.filter, op.total) for op in ops.recent()] == [("refused", {"search": "b1"}, 0)] * 2
    admin = as_role(store, "ada", "admin")
    assert ops.preview(admin, "restart", JobFilter(search="B1"), reason="r", dry_run=True).operation.total == 1


def test_control_selects_by_the_same_rule_as_its_previews(store: StateStore, control: Control) -> None:
    """One reader per Control (its identity under its policy): `select` refuses a search its previews refuse."""
    failed_jobs(store, "b1", queue="billing")
    otto = as_role(store, "otto", "operator", queues=["billing"])
    assert (otto.reader.name, otto.reader.may_search) == ("otto", False)
    with pytest.raises(NotAuthorized, match="'otto' may not search arguments"):
        otto.select(JobFilter(search="b1"))
    assert [job.job_id for job in otto.select(JobFilter(queue="billing"))] == ["b1"]
    admin = as_role(store, "ada", "admin")
    assert [job.job_id for job in admin.select(JobFilter(search="B1"))] == ["b1"]
    assert [job.job_id for job in control.select(JobFilter(search="b1"))] == ["b1"]  # allow-all: the store's holder


def test_commands_options_and_filters_are_validated(store: StateStore, ops: Operations, control: Control) -> None:
    failed_jobs(store, "f1")
    with pytest.raises(ConfigError, match="unknown command 'explode'"):
        ops.preview(control, "explode", FAILED, reason="r")
    with pytest.raises(ReasonRequired):
        ops.preview(control, "restart", FAILED, reason=" ")
    with pytest.raises(ConfigError, match="narrows"):
        ops.preview(control, "restart", JobFilter(), reason="r")
    with pytest.raises(ConfigError, match=r"reconcile needs options\.resolution"):
        ops.preview(control, "reconcile", FAILED, reason="r")
    with pytest.raises(ConfigError, match="pause takes no option 'resolution'"):
        ops.preview(control, "pause", FAILED, reason="r", options={"resolution": "succeeded"})
    assert ops.preview(control, "retry", FAILED, reason="r").operation.command == "requeue"
    assert ops.recent() and all(op.status == "awaiting_confirmation" for op in ops.recent())


def test_more_jobs_than_bulk_max_are_refused(store: StateStore, control: Control, fake: FakeTime) -> None:
    for i in range(4):
        make(store, f"p{i}")
    ops = Operations(store, bulk_max=3, clock=fake.clock, sleep=fake.sleep)
    with pytest.raises(ConfigError, match="matches 4 jobs, more than one operation may act on \\(3"):
        ops.preview(control, "pause", JobFilter(statuses=(JobStatus.PENDING,)), reason="r")
    assert ops.preview(control, "pause", JobFilter(job_ids=("p0", "p1")), reason="r").operation.total == 2


def test_options_reach_the_command(store: StateStore, ops: Operations, control: Control) -> None:
    ended(store, "r1", Event.NEED_REVIEW)
    preview = ops.preview(control, "reconcile", JobFilter(statuses=(JobStatus.REVIEW,)), reason="checked",
                          options={"resolution": "succeeded"})
    ops.confirm(preview.operation.operation_id, preview.confirm_token, control)
    assert finished(ops, preview.operation.operation_id).counts == {"done": 1}
    assert store.get("r1").status is JobStatus.SUCCEEDED


def test_a_run_whose_process_died_shows_as_interrupted(store: StateStore, ops: Operations,
                                                       control: Control) -> None:
    failed_jobs(store, "f1")
    preview = ops.preview(control, "restart", FAILED, reason="r")
    op_id = preview.operation.operation_id
    # what a crash leaves: a confirmed row `running`, its last heartbeat long ago, no thread anywhere
    with store.write() as conn:
        conn.execute(operations.update().where(operations.c.operation_id == op_id).values(
            status="running", confirmed_at=store.now() - 600, updated_at=store.now() - 600,
            results=json.dumps([])))
    fresh = Operations(store)  # a restarted process
    op = fresh.get(op_id)
    assert op.status == "interrupted" and op.error and "stopped" in op.error and op.finished_at is not None
    assert [o.status for o in fresh.recent()] == ["interrupted"]
    with pytest.raises(ControlRefused, match="nothing to cancel"):
        fresh.cancel(op_id, "alice")


def test_recent_is_newest_first(store: StateStore, ops: Operations, control: Control) -> None:
    failed_jobs(store, "f1")
    first = ops.preview(control, "restart", FAILED, reason="one").operation
    second = ops.preview(control, "discard", FAILED, reason="two").operation
    with store.write() as conn:
        conn.execute(operations.update().where(operations.c.operation_id == first.operation_id)
                     .values(created_at=second.created_at - 10))
    assert [op.operation_id for op in ops.recent()] == [second.operation_id, first.operation_id]
    assert [op.operation_id for op in ops.recent(limit=1)] == [second.operation_id]
