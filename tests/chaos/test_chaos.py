"""The chaos suite: worker SIGKILLs, a frozen worker, RabbitMQ and PostgreSQL restarts, during thousands
of checkpointed jobs with recorded effects. Nothing may be lost, no effect may be applied twice.

CI-sized by default (2,000 jobs, 6 faults, ~2-3 minutes); `pytest tests/chaos --soak` for the long
form (10,000 jobs, 17 faults). The figures are printed as one paragraph and written as JSON to
$RELIABLE_CHAOS_REPORT when set. See docs/chaos.md.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest
from chaos_run import (
    MAX_ATTEMPTS,
    POLICY,
    Chaos,
    ChaosConfig,
    Fault,
    Producer,
    collect_figures,
    plan_faults,
    report_paragraph,
    wait_for,
    worker_pid,
    write_report,
)
from chaos_services import ServiceGuard

from reliable.states import JobStatus
from reliable.store import StateStore

from support import RABBITMQ_URL

pytestmark = [pytest.mark.chaos, pytest.mark.integration, pytest.mark.slow]


@pytest.mark.timeout(1200)  # the soak form's bound; the CI form bounds itself at config.run_timeout + teardown
@pytest.mark.exclusive  # restarts the shared RabbitMQ and PostgreSQL
def test_chaos_no_job_lost_no_effect_twice(chaos_config: ChaosConfig, services: ServiceGuard,
                                          chaos_database: str, chaos_queue: str, chaos_logs: Path) -> None:
    config = chaos_config
    rng = random.Random(config.seed)
    print(f"\nchaos: {config}")
    env = {"RELIABLE_TEST_BROKER": RABBITMQ_URL, "RELIABLE_TEST_STORE": chaos_database,
           "RELIABLE_TEST_QUEUE": chaos_queue, "RELIABLE_CHAOS_POLICY": str(POLICY)}
    store = StateStore(chaos_database)
    started = time.monotonic()
    deadline = started + config.run_timeout
    faults = plan_faults(rng, config.kills, config.freezes, config.rabbitmq_restarts, config.postgres_restarts)
    producer = Producer(RABBITMQ_URL, chaos_database, chaos_queue, config.jobs, config.backlog,
                        (config.units, config.unit_seconds))
    chaos = Chaos(env, chaos_logs, store, services.cluster, workers=config.workers, threads=config.threads, rng=rng,
                  started=started)
    revived = 0
    problems: list[str] = []

    def succeeded() -> int:
        return store.count_by_status().get(JobStatus.SUCCEEDED, 0)

    try:
        producer.start()
        for fault in faults:
            target = int(fault.progress * config.jobs)
            if not wait_for(lambda t=target: succeeded() >= t, max(1.0, deadline - time.monotonic())):  # type: ignore[misc]
                problems.append(f"progress stalled before the {fault.kind} fault at {fault.progress:.0%}")
                break
            revived += chaos.revive_dead()
            chaos.inject(fault, freeze_seconds=config.freeze_seconds, rabbitmq_down=config.rabbitmq_down_seconds,
                         postgres_down=config.postgres_down_seconds)
        last_fault_over = time.monotonic()
        settle_until = min(deadline, last_fault_over + config.settle_timeout)

        def settled() -> bool:
            nonlocal revived
            revived += chaos.revive_dead()
            return producer.done.is_set() and succeeded() >= len(producer.job_ids)

        if not problems and not wait_for(settled, max(1.0, settle_until - time.monotonic()), poll=0.5):
            problems.append(f"not settled {settle_until - last_fault_over:.0f}s after the last fault: "
                            f"{store.count_by_status()}, {len(producer.job_ids)} jobs produced")
        settle_seconds = time.monotonic() - last_fault_over
    finally:
        producer.close()
        chaos.stop()
        store.close()
    elapsed = time.monotonic() - started

    figures: dict[str, Any] = {
        "config": config.name, "seed": config.seed, "units": config.units, "jobs_target": config.jobs,
        "workers": config.workers, "threads": config.threads, "seconds": round(elapsed, 1),
        "settle_seconds_after_last_fault": round(settle_seconds, 1),
        "faults": [{"kind": f.kind, "progress": f.progress, "at": f.at, "duration": f.duration,
                    **{k: v for k, v in f.detail.items() if k != "jobs"}} for f in faults],
        "workers_exited_unexpectedly": revived, "producer_publish_failures": producer.publish_failures,
        "problems": problems,
    }
    figures.update(collect_figures(chaos_database, producer.job_ids, config.units,
                                   [w.log_path for w in chaos.all_workers]))
    write_report(figures)
    print(report_paragraph(config.name, figures, faults, elapsed))
    print(f"chaos: worker logs in {chaos_logs}")

    # -- the promises ------------------------------------------------------------------------------
    assert not problems, problems
    assert producer.error is None, producer.error
    assert figures["jobs_produced"] == config.jobs == figures["jobs_in_store"]
    assert figures["jobs_lost"] == 0, f"jobs not SUCCEEDED: {figures['lost_job_ids']}"
    assert figures["status_counts"] == {JobStatus.SUCCEEDED.value: config.jobs}
    assert not figures["jobs_not_exactly_one_succeed"], "a job succeeded twice (or never)"
    assert figures["max_attempt"] < MAX_ATTEMPTS, "the policy would have dead-lettered a job"
    assert not figures["other_crash_outcomes"], figures["other_crash_outcomes"]
    # Every unit's effect recorded exactly once; replays were detected (and counted), never re-applied.
    assert figures["unit_effect_rows"] == figures["unit_effects_expected"] == config.jobs * config.units
    assert figures["unit_effects_missing"] == figures["unit_effects_unexpected"] == 0
    assert figures["effects_applied_twice"] == 0, f"ledger doubles: {figures['effects_applied_twice_keys']}"
    assert figures["duplicate_effect_events"] == figures["replays_detected"]
    # A unit missing from the ledger is one whose effect was recorded by an attempt that was then cut
    # short (killed between record_effect and the ledger write): the window of record-then-apply.
    assert all(outcome != "succeed" for outcome in figures["ledger_gap_attempt_outcomes"].values()), \
        figures["ledger_gap_attempt_outcomes"]
    # Every expired lease was re-claimed, or its own worker's late completion was accepted first.
    assert figures["lease_expired_not_reclaimed"] == 0, figures["lease_expired_not_reclaimed_histories"]
    if figures["recovery_seconds_max"] is not None:
        assert figures["recovery_seconds_max"] < 60, "a job waited a minute to be re-claimed"

    kills = [f for f in faults if f.kind == "kill"]
    freezes = [f for f in faults if f.kind == "freeze"]
    expired_pids = {worker_pid(w) for w in figures["lease_expired_workers"]}
    for fault in kills + freezes:
        # The faulted worker held running jobs: their leases expired and were taken over.
        assert fault.detail["running_jobs"] > 0
        assert expired_pids & set(fault.detail["pids"]), f"no lease of the {fault.kind}ed worker expired"
    if freezes:
        assert figures["stale_commits_genuine"] > 0, "the thawed worker's writes must have been refused"
    if any(f.kind == "postgres" for f in faults):
        assert figures["store_unavailable_kept_unacked_lines"] > 0, \
            "workers must say they wait for the store (message kept unacked)"
    assert revived == 0, "a worker exited on its own during the run"


def _fault_kinds(faults: list[Fault]) -> list[str]:
    return [f.kind for f in faults]


def test_fault_plan_is_reproducible_and_complete() -> None:
    plan = plan_faults(random.Random(7), kills=3, freezes=1, rabbitmq=1, postgres=1)
    again = plan_faults(random.Random(7), kills=3, freezes=1, rabbitmq=1, postgres=1)
    assert [(f.kind, f.progress) for f in plan] == [(f.kind, f.progress) for f in again]
    assert sorted(_fault_kinds(plan)) == ["freeze", "kill", "kill", "kill", "postgres", "rabbitmq"]
    progress = [f.progress for f in plan]
    assert progress == sorted(progress) and progress[0] >= 0.03 and progress[-1] <= 0.9
