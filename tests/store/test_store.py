"""The StateStore contract: every database passes the same suite."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliable.errors import ClaimRefused, ConfigError, JobNotFound, LeaseLost, StoreNotMigrated, TransitionRefused
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.sqlrunner import load_queries

from support import Clock


def new_job(job_id: str = "job-1", **kw: object) -> NewJob:
    fields: dict[str, object] = {"queue": "default", "actor": "export", "message": {"args": [1]}}
    fields.update(kw)
    return NewJob(job_id, **fields)  # type: ignore[arg-type]


def test_register_is_idempotent_and_records_one_event(store: StateStore) -> None:
    assert store.register(new_job(owner="team-data", trace_id="t1")) is True
    assert store.register(new_job()) is False
    job = store.get("job-1")
    assert (job.status, job.version, job.lease_id, job.attempt) == (JobStatus.PENDING, 1, 0, 0)
    assert job.owner == "team-data" and job.trace_id == "t1" and job.message == {"args": [1]}
    assert [e.event for e in store.events("job-1")] == ["enqueued"]


def test_register_many_counts_new_rows(store: StateStore) -> None:
    assert store.register_many([new_job(f"j{i}") for i in range(1200)]) == 1200
    assert store.register_many([new_job("j1"), new_job("extra")]) == 1
    assert store.count_by_status()[JobStatus.PENDING] == 1201


def test_claim_writes_lease_and_attempt(store: StateStore) -> None:
    store.register(new_job())
    before = store.now()
    claim = store.claim("job-1", worker_id="w1", lease_ttl=30)
    job = claim.job
    assert job.status is JobStatus.RUNNING and job.worker_id == "w1"
    assert claim.lease_id == 1 and job.attempt == 1 and job.version == 2
    assert job.started_at is not None and before - 1 <= job.started_at <= before + 5
    assert job.lease_expires_at is not None
    assert job.lease_expires_at == pytest.approx(job.started_at + 30, abs=1)
    [attempt] = store.attempts("job-1")
    assert attempt.attempt_id == claim.attempt_id and attempt.lease_id == 1 and attempt.ended_at is None


def test_second_claim_is_refused_while_held(store: StateStore) -> None:
    store.register(new_job())
    store.claim("job-1", worker_id="w1", lease_ttl=30)
    with pytest.raises(ClaimRefused) as info:
        store.claim("job-1", worker_id="w2", lease_ttl=30)
    assert info.value.reason == "held"


def test_claim_refusal_reasons(store: StateStore) -> None:
    with pytest.raises(ClaimRefused) as info:
        store.claim("missing", worker_id="w", lease_ttl=5)
    assert info.value.reason == "not_found"
    store.register(new_job())
    claim = store.claim("job-1", worker_id="w", lease_ttl=5)
    store.finish("job-1", claim.lease_id, Event.SUCCEED)
    with pytest.raises(ClaimRefused) as info:
        store.claim("job-1", worker_id="w", lease_ttl=5)
    assert info.value.reason == "finished"
    store.register(new_job("p"))
    store.transition("p", Event.PAUSE, operator="alice", reason="maintenance")
    with pytest.raises(ClaimRefused) as info:
        store.claim("p", worker_id="w", lease_ttl=5)
    assert info.value.reason == "paused"


def test_retry_wait_is_claimable_only_once_due(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    store.register(new_job())
    claim = store.claim("job-1", worker_id="w", lease_ttl=5)
    err = ErrorInfo("transient", "TimeoutError", "slow")
    job = store.finish("job-1", claim.lease_id, Event.RETRY, retry_delay=0.6, error=err)
    assert job.status is JobStatus.RETRY_WAIT and job.retry_count == 1
    assert job.last_error_class == "transient"
    with pytest.raises(ClaimRefused) as info:
        store.claim("job-1", worker_id="w", lease_ttl=5)
    assert info.value.reason == "not_due"
    assert info.value.retry_in is not None and 0 < info.value.retry_in <= 0.6
    clock.now += 0.7
    second = store.claim("job-1", worker_id="w", lease_ttl=5)
    assert second.lease_id == 2 and second.job.attempt == 2 and second.job.retry_at is None
    [first, _] = store.attempts("job-1")
    assert first.outcome == "retry_scheduled" and first.error_class == "transient"


def test_fenced_finish_rejects_stale_lease_and_records_it(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    store.register(new_job())
    old = store.claim("job-1", worker_id="old", lease_ttl=0.2)
    clock.now += 0.4
    [expired] = store.expired_leases()
    store.transition("job-1", Event.LEASE_EXPIRED, expected_version=expired.version, lease_id=old.lease_id,
                     dispatch=True, lease_expired=True)
    new = store.claim("job-1", worker_id="new", lease_ttl=30)
    assert new.lease_id == old.lease_id + 1
    for stale_write in (
        lambda: store.finish("job-1", old.lease_id, Event.SUCCEED, worker_id="old"),
        lambda: store.save_checkpoint("job-1", old.lease_id, 5, lease_ttl=5, worker_id="old"),
        lambda: store.record_effect("job-1", old.lease_id, "job-1:0"),
    ):
        with pytest.raises(LeaseLost) as info:
            stale_write()
        assert info.value.current_lease_id == new.lease_id
    assert store.renew("old", [("job-1", old.lease_id)], 5) == {}
    store.finish("job-1", new.lease_id, Event.SUCCEED, worker_id="new")
    job = store.get("job-1")
    assert job.status is JobStatus.SUCCEEDED and job.worker_id == "new"
    events = [e.event for e in store.events("job-1")]
    assert events.count("stale_commit_rejected") == 3
    assert events[:4] == ["enqueued", "claim", "lease_expired", "claim"]


def test_heartbeat_renews_all_leases_in_one_call_and_reports_flags(store: StateStore) -> None:
    store.register_many([new_job("a"), new_job("b"), new_job("c")])
    leases = {j: store.claim(j, worker_id="w", lease_ttl=1).lease_id for j in ("a", "b", "c")}
    store.transition("b", Event.PAUSE_REQUEST, operator="op")
    store.transition("c", Event.CANCEL_REQUEST, operator="op")
    answer = store.renew("w", leases.items(), lease_ttl=60)
    assert set(answer) == {"a", "b", "c"}
    assert answer["b"].pause_requested and not answer["a"].pause_requested
    assert answer["c"].status is JobStatus.STOPPING and answer["c"].cancel_requested
    assert answer["a"].lease_expires_at > store.now() + 50


def test_checkpoint_is_durable_and_versioned(store: StateStore) -> None:
    store.register(new_job())
    claim = store.claim("job-1", worker_id="w", lease_ttl=5)
    for page in range(3):
        store.save_checkpoint("job-1", claim.lease_id, {"page": page}, lease_ttl=5)
    job = store.get("job-1")
    assert job.checkpoint == {"page": 2} and job.checkpoint_version == 3
    assert job.version == 2, "checkpoints are not state transitions"


def test_effects_detect_replays(store: StateStore) -> None:
    store.register(new_job())
    claim = store.claim("job-1", worker_id="w", lease_ttl=5)
    first = store.record_effect("job-1", claim.lease_id, "job-1:7", attempt_id=claim.attempt_id)
    again = store.record_effect("job-1", claim.lease_id, "job-1:7")
    assert first.applied and not again.applied and again.duplicates == 1
    assert [e.event for e in store.events("job-1")][-1] == "duplicate_effect"
    assert again.attempt_id == claim.attempt_id
    assert store.effect_recorded("job-1", "job-1:7") and not store.effect_recorded("job-1", "job-1:8")


def test_operator_transition_is_cas_on_version(store: StateStore) -> None:
    store.register(new_job())
    job = store.get("job-1")
    store.transition("job-1", Event.PAUSE, expected_version=job.version, operator="alice", reason="why")
    with pytest.raises(TransitionRefused) as info:
        store.transition("job-1", Event.RESUME, expected_version=job.version, operator="bob")
    assert "version" in str(info.value)
    resumed = store.transition("job-1", Event.RESUME, expected_version=job.version + 1, operator="bob")
    assert resumed.status is JobStatus.PENDING
    with pytest.raises(TransitionRefused) as info:
        store.transition("job-1", Event.RECONCILE_SUCCEEDED, operator="bob")
    assert "PENDING" in str(info.value)
    pause = next(e for e in store.events("job-1") if e.event == "pause")
    assert (pause.operator, pause.reason, pause.from_status, pause.to_status) == (
        "alice", "why", "PENDING", "PAUSED")
    assert pause.host


def test_unknown_job_and_unmigrated_store(store: StateStore, tmp_path: Path) -> None:
    with pytest.raises(JobNotFound):
        store.get("nope")
    with pytest.raises(JobNotFound):
        store.transition("nope", Event.PAUSE)
    bare = StateStore(f"sqlite:///{tmp_path}/bare.db")
    with pytest.raises(StoreNotMigrated, match="reliable db upgrade --store sqlite:///"):
        bare.get("x")


def test_job_ids_with_prefix_is_exact_at_the_edges_of_its_range(store: StateStore) -> None:
    store.register_many([new_job(i) for i in ("ab", "ab-1", "ab1", "ab1~", "ab2", "aB1", "b", "ab!")])
    assert store.job_ids_with_prefix("ab1", limit=10) == ["ab1", "ab1~"]
    assert store.job_ids_with_prefix("ab", limit=10) == ["ab", "ab!", "ab-1", "ab1", "ab1~", "ab2"]
    assert store.job_ids_with_prefix("ab", limit=2) == ["ab", "ab!"]
    assert store.job_ids_with_prefix("ab1~", limit=10) == ["ab1~"]
    assert store.job_ids_with_prefix("ab~", limit=10) == []
    assert store.job_ids_with_prefix("c", limit=10) == []
    with pytest.raises(ConfigError, match="printable ASCII"):
        store.job_ids_with_prefix("\u00e9t\u00e9", limit=1)


def test_job_ids_with_prefix_reads_a_range_of_the_primary_key(store: StateStore) -> None:
    sql = load_queries(store.dialect)["job_ids_by_prefix"]
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        if store.dialect == "postgresql":
            cursor.execute("SET enable_seqscan = off")  # a few rows: the planner would scan them all
            cursor.execute(f"EXPLAIN {sql}", {"prefix": "ab", "prefix_end": "ac", "limit": 11})
            plan = " ".join(row[0] for row in cursor.fetchall())
            assert "Index" in plan and "reliable_jobs_pkey" in plan, plan
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", {"prefix": "ab", "prefix_end": "ac", "limit": 11})
            plan = " ".join(str(row[-1]) for row in cursor.fetchall())
            assert "job_id>? AND job_id<?" in plan, plan
    finally:
        raw.rollback()
        raw.close()


def test_recovery_queries(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    store.register_many([new_job("lease"), new_job("retry"), new_job("pending"), new_job("fresh")])
    store.claim("lease", worker_id="w", lease_ttl=0.1)
    claim = store.claim("retry", worker_id="w", lease_ttl=30)
    store.finish("retry", claim.lease_id, Event.RETRY, retry_delay=0.1)
    clock.now += 2.0
    store.register(new_job("later"))
    assert [j.job_id for j in store.expired_leases()] == ["lease"]
    assert [j.job_id for j in store.due_retries(grace=0.5)] == ["retry"]
    assert {j.job_id for j in store.stale_pending(age=1.0)} == {"pending", "fresh"}
    pending = store.get("pending")
    assert store.mark_dispatched(pending, worker_id="sweeper-1")
    assert not store.mark_dispatched(pending), "a second sweeper with the same view loses"
    assert [j.job_id for j in store.stale_pending(age=1.0)] == ["fresh"]
    assert [(e.event, e.worker_id) for e in store.events("pending")] == [("enqueued", None),
                                                                         ("redispatched", "sweeper-1")]
    store.claim("fresh", worker_id="dead-worker", lease_ttl=30)  # the job's last worker...
    store.transition("fresh", Event.LEASE_EXPIRED, lease_expired=False, reason="test")
    assert store.mark_dispatched(store.get("fresh"), worker_id="sweeper-2")
    assert store.events("fresh")[-1].worker_id == "sweeper-2"  # ...is not who re-published it


def test_listeners_get_every_event_after_commit(store_url: str) -> None:
    seen: list[dict[str, object]] = []
    clock = Clock()
    store = StateStore(store_url, listeners=[seen.append], clock=clock)
    store.add_listener(lambda event: 1 / 0)  # a broken observer never breaks a transition
    store.register(new_job())
    claim = store.claim("job-1", worker_id="w", lease_ttl=5)
    store.save_checkpoint("job-1", claim.lease_id, {"page": 1}, lease_ttl=5)
    store.finish("job-1", claim.lease_id, Event.RETRY, retry_delay=0.01, error=ErrorInfo("transient", "E", "m"))
    with pytest.raises(LeaseLost):
        store.finish("job-1", claim.lease_id, Event.SUCCEED)
    clock.now += 0.05
    claim = store.claim("job-1", worker_id="w", lease_ttl=5)
    store.transition("job-1", Event.STOP_REQUEST, operator="alice", reason="deploy")
    names = [e["event"] for e in seen]
    assert names == ["enqueued", "claim", "checkpoint", "retry_scheduled", "stale_commit_rejected", "claim",
                     "stop_requested"]
    stored = store.events("job-1")
    assert [e.event for e in stored] == names
    for emitted, row in zip(seen, stored, strict=True):
        for field in ("job_id", "event", "from_status", "to_status", "attempt", "attempt_id", "lease_id",
                      "error_class", "operator", "reason", "checkpoint"):
            assert emitted[field] == getattr(row, field), (emitted["event"], field)
        assert emitted["at"] == row.at
    assert seen[3]["detail"] == {"delay": 0.01} and seen[3]["started_at"] is not None
    store.close()


def test_events_are_filtered_by_name_time_and_count_in_the_database(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    store.register(new_job())
    start = clock.now
    claim = store.claim("job-1", worker_id="w1", lease_ttl=30)
    for page in range(5):
        clock.now += 10
        store.save_checkpoint("job-1", claim.lease_id, {"page": page}, lease_ttl=30)
    clock.now += 10
    store.transition("job-1", Event.PAUSE_REQUEST, operator="alice", reason="maintenance")
    everything = store.events("job-1")
    assert [e.event for e in everything] == ["enqueued", "claim", *["checkpoint"] * 5, "pause_requested"]
    assert [e.event for e in store.events("job-1", events=["claim", "pause_requested"])] == ["claim",
                                                                                           "pause_requested"]
    assert store.events("job-1", events=["no_such_event"]) == []
    recent = store.events("job-1", since=start + 30)  # checkpoints at +30 and +40 and +50, pause at +60
    assert [e.checkpoint for e in recent if e.event == "checkpoint"] == [{"page": 2}, {"page": 3}, {"page": 4}]
    assert recent == everything[-4:]
    assert store.events("job-1", limit=2) == everything[-2:], "the most recent ones, oldest first"
    assert store.events("job-1", limit=100) == everything
    last_two = store.events("job-1", events=["checkpoint"], since=start + 20, limit=2)
    assert [e.checkpoint for e in last_two] == [{"page": 3}, {"page": 4}]
