"""Retention: delete the history of jobs that finished long ago (`reliable db prune`).

What goes: jobs in a terminal state (SUCCEEDED, FAILED, CANCELLED, DEAD, or a subset asked for)
last changed before the cut, with their events, attempts and effects; workflows that ended before
the cut, with their nodes, edges and events; bulk operations that ended before the cut; the latency
and outcome history's buckets that ended before the cut or are past their horizon
(`job_stats.prune_stats`: the workers delete the latter too, so the table stays bounded). What stays:
every job not in a terminal state (running, waiting, paused, stopped, in review), and every node
job of a workflow that is still live or ended after the cut (its workflow still shows it).

How: in batches of `batch_size` jobs, oldest first, one state at a time (the (status, updated_at)
index serves each batch). On PostgreSQL a batch is one statement whose rows are locked with SKIP
LOCKED: a job an operator or a worker holds at that moment is skipped, and a worker's write to a
job being deleted waits for that one batch at most. On SQLite a batch is one BEGIN IMMEDIATE
transaction: other writers wait for one batch at most. Every run ends with an audit record, a
`prune` row among the bulk operations (`reliable operations`), also when it stopped early.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from ..errors import ConfigError
from ..inputs import MAX_NAME, check_length, check_reason, check_reason_chars
from ..states import ACTIVE_STATES, TERMINAL_STATES, JobStatus
from .bulk_operations import ENDED_OPERATION_STATUSES, insert_operation
from .job_history import starts_attempt
from .job_stats import prune_stats
from .named_queries import NamedQueries
from .workflow_views import WorkflowStatus

__all__ = ["DEFAULT_BATCH", "PruneCounts", "PruneResult", "count_prunable", "prune", "prune_states"]

#: Jobs per batch: small enough that a batch (with its events) commits in tens of milliseconds.
DEFAULT_BATCH = 1000


@dataclass(frozen=True)
class PruneCounts:
    """Rows deleted (or that would be) per kind."""

    jobs: int = 0
    events: int = 0
    attempts: int = 0  # the attempts those events recorded (claims): no rows of their own (job_history.py)
    effects: int = 0
    workflows: int = 0
    workflow_rows: int = 0  # the workflows' nodes, edges and events
    operations: int = 0
    stats: int = 0  # the latency and outcome history's rows (reliable.store.job_stats)

    @property
    def rows(self) -> int:
        """Every row, all tables together."""
        return sum(asdict(self).values())

    def __add__(self, other: PruneCounts) -> PruneCounts:
        mine, theirs = asdict(self), asdict(other)
        return PruneCounts(**{key: mine[key] + theirs[key] for key in mine})

    def as_dict(self) -> dict[str, int]:
        """JSON-ready, with the total."""
        return {**asdict(self), "rows": self.rows}


@dataclass(frozen=True)
class PruneResult:
    """What a prune deleted, how long it took, and its audit record."""

    cut: float
    counts: PruneCounts
    seconds: float
    batches: int
    longest_batch: float  # seconds: the longest any writer could have waited on this prune
    operation_id: str
    complete: bool  # False: stopped early (an error, or interrupted); the audit record says so

    @property
    def rows_per_second(self) -> float:
        """Rows deleted per second of the run."""
        return self.counts.rows / self.seconds if self.seconds > 0 else 0.0


def prune_states(states: Iterable[str] | None) -> tuple[str, ...]:
    """The job states to prune (every terminal one when `states` is empty); ConfigError for a state
    that is not terminal (a job not at rest is never deleted)."""
    chosen = sorted({JobStatus(s.upper()) for s in states} if states else TERMINAL_STATES)
    refused = [s.value for s in chosen if s not in TERMINAL_STATES]
    if refused:
        raise ConfigError(f"prune deletes finished jobs only: {', '.join(refused)} is not a terminal state "
                          f"(terminal: {', '.join(sorted(s.value for s in TERMINAL_STATES))})")
    return tuple(s.value for s in chosen)


def _params(cut: float, states: tuple[str, ...], batch: int) -> dict[str, object]:
    return {"cut": cut, "states": list(states), "active": sorted(s.value for s in ACTIVE_STATES),
            "workflow_final": sorted(WorkflowStatus.FINAL),
            "ended": list(ENDED_OPERATION_STATUSES), "batch": batch}


def count_prunable(store: NamedQueries, cut: float, *, states: Iterable[str] | None = None) -> PruneCounts:
    """What `prune` would delete at `cut` (epoch seconds, the store's clock) now."""
    params = _params(cut, prune_states(states), 0)
    jobs = store.one("prune_count_jobs", params) or (0, 0, 0, 0)
    workflows = store.one("prune_count_workflows", params) or (0,)
    operations = store.one("prune_count_operations", params) or (0,)
    return PruneCounts(jobs=int(jobs[0]), events=int(jobs[1]), attempts=int(jobs[2]), effects=int(jobs[3]),
                       workflows=int(workflows[0]), operations=int(operations[0]))


def _job_batch(store: NamedQueries, params: dict[str, object]) -> PruneCounts:
    if store.dialect == "postgresql":
        row = store.one("prune_jobs", params) or (0, 0, 0, 0)
        return PruneCounts(jobs=int(row[0]), events=int(row[1]), attempts=int(row[2]), effects=int(row[3]))
    with store.transaction() as unit:
        ids = [row[0] for row in unit.rows("prune_pick_jobs", params)]
        if not ids:
            return PruneCounts()
        chosen = {"job_ids": ids}
        events = unit.rows("prune_job_events", chosen)
        return PruneCounts(events=len(events), attempts=sum(starts_attempt(*row) for row in events),
                           effects=len(unit.rows("prune_job_effects", chosen)),
                           jobs=len(unit.rows("prune_job_rows", chosen)))


def _workflow_batch(store: NamedQueries, params: dict[str, object]) -> PruneCounts:
    if store.dialect == "postgresql":
        row = store.one("prune_workflows", params) or (0, 0)
        return PruneCounts(workflows=int(row[0]), workflow_rows=int(row[1]))
    with store.transaction() as unit:
        ids = [row[0] for row in unit.rows("prune_pick_workflows", params)]
        if not ids:
            return PruneCounts()
        chosen = {"workflow_ids": ids}
        parts = sum(len(unit.rows(name, chosen))
                    for name in ("prune_workflow_nodes", "prune_workflow_edges", "prune_workflow_events"))
        return PruneCounts(workflows=len(unit.rows("prune_workflow_rows", chosen)), workflow_rows=parts)


def _operation_batch(store: NamedQueries, params: dict[str, object]) -> PruneCounts:
    if store.dialect == "postgresql":
        row = store.one("prune_operations", params) or (0,)
        return PruneCounts(operations=int(row[0]))
    with store.transaction() as unit:
        return PruneCounts(operations=len(unit.rows("prune_operations", params)))


def _check_audit_text(operator: str, reason: str) -> None:
    """The audit record's who and why, checked as every command's (`inputs.check_length`): a blank
    reason is ReasonRequired, one longer than `inputs.MAX_TEXT` or an operator's name longer than
    `inputs.MAX_NAME` is TextTooLong, control characters are InvalidReason; before anything is deleted."""
    check_length("operator", operator, limit=MAX_NAME, where="prune")
    check_reason("prune", reason, required=True)
    check_reason_chars("prune", reason)


def prune(store: NamedQueries, cut: float, *, states: Iterable[str] | None = None, batch_size: int = DEFAULT_BATCH,
          operator: str, reason: str, planned: PruneCounts | None = None,
          on_batch: Callable[[PruneCounts], None] | None = None,
          clock: Callable[[], float] = time.monotonic) -> PruneResult:
    """Delete what `count_prunable(store, cut)` counts, in batches (see the module's docstring).

    `operator` and `reason` go into the audit record, with the counts `planned` (shown to the
    operator first) and those deleted (checked first: `_check_audit_text`); `on_batch` gets the running total
    after each batch.
    """
    _check_audit_text(operator, reason)
    if batch_size < 1:
        raise ConfigError(f"batch size must be at least 1, not {batch_size}")
    chosen = prune_states(states)
    params = _params(cut, chosen, batch_size)
    started_at, started = store.now(), clock()
    total, batches, longest, complete = PruneCounts(), 0, 0.0, False
    steps: list[tuple[Callable[[NamedQueries, dict[str, object]], PruneCounts], dict[str, object]]] = [
        *((_job_batch, {**params, "state": state}) for state in chosen),
        (_workflow_batch, params), (_operation_batch, params)]
    try:
        for step, step_params in steps:
            while True:
                began = clock()
                done = step(store, step_params)
                longest = max(longest, clock() - began)
                batches += 1
                total += done
                if on_batch is not None:
                    on_batch(total)
                if done.jobs + done.workflows + done.operations < batch_size:
                    break
        total += PruneCounts(stats=prune_stats(store, cut=cut))
        complete = True
    finally:
        seconds = clock() - started
        operation_id = _audit(store, cut=cut, states=chosen, batch_size=batch_size, operator=operator,
                              reason=reason, planned=planned, total=total, seconds=seconds, started_at=started_at,
                              complete=complete)
    return PruneResult(cut=cut, counts=total, seconds=seconds, batches=batches, longest_batch=longest,
                       operation_id=operation_id, complete=complete)


def _audit(store: NamedQueries, *, cut: float, states: tuple[str, ...], batch_size: int, operator: str, reason: str,
           planned: PruneCounts | None, total: PruneCounts, seconds: float, started_at: float,
           complete: bool) -> str:
    """The run's record among the bulk operations: who, why, the cut, what was counted and deleted."""
    operation_id = secrets.token_hex(8)
    finished_at = store.now()
    insert_operation(store, {
        "operation_id": operation_id, "command": "prune", "job_ids": "[]", "reason": reason, "operator": operator,
        "filter": json.dumps({"finished_before": cut, "states": list(states)}),
        "options": json.dumps({"batch_size": batch_size}), "source": "cli",
        "status": "finished" if complete else "interrupted", "total": planned.jobs if planned else total.jobs,
        "done": total.jobs, "rate": total.rows / seconds if seconds > 0 else None,
        "counts": json.dumps({"by_outcome": total.as_dict(), "planned": planned.as_dict() if planned else None}),
        "created_at": started_at, "expires_at": started_at, "confirmed_at": started_at, "confirmed_by": operator,
        "finished_at": finished_at, "updated_at": finished_at,
        "error": None if complete else "stopped before the end: run it again to delete the rest",
    })
    return operation_id
