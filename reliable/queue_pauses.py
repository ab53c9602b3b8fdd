"""Pausing a whole queue: an operator's flag kept in the store, honoured by every worker's claim.

`pause` writes a row of `reliable_queue_pauses` (who, when, from where, why); `resume` removes it.
Both are audited in `reliable_queue_events`, and so is a command the operators policy refuses
(`command_refused`, as for jobs): a queue command is checked as the policy's `pause` / `resume` on
that queue (`commands.QUEUE_COMMANDS`), for jobs of any owner, so a rule limited to owners never
covers it. Every queue command needs a reason (`commands.require_reason`).

What a pause does (the worker side is `reliable.worker.paused`): a delivery of a paused queue is
published again later and skipped before its claim, the way a limit defers one: the job stays
PENDING with its attempt count unchanged and no worker thread waits for the resume. Jobs already
RUNNING are not touched (pause them one by one, or in bulk by `--queue`). Workers see a pause or a
resume within their cache's staleness (`reliable.worker.paused.REFRESH_SECONDS`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .commands import QUEUE_COMMANDS, check_reason_text, require_reason
from .errors import ConfigError, NotAuthorized
from .inputs import escape_controls, text_problem
from .operators import Operator, OperatorsPolicy
from .states import FAILURE_STATES, TERMINAL_STATES, JobStatus
from .store import StateStore, pause_queries
from .store.audit_trail import AuditEntry
from .store.named_rows import Executor
from .store.overview import Overview

__all__ = ["MAX_QUEUE_NAME", "QueueEvent", "QueuePause", "QueueState", "check_queue_name", "events", "pause",
           "paused", "queue_figures", "queue_name_problem", "queue_names", "resume"]

#: The longest queue name the store keeps (its column's size).
MAX_QUEUE_NAME = 255


@dataclass(frozen=True)
class QueuePause:
    """A paused queue: since when, by whom, from where and why."""

    queue: str
    paused_at: float
    operator: str
    host: str | None
    source: str | None
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The pause as JSON-ready values."""
        return asdict(self)


@dataclass(frozen=True)
class QueueState:
    """The paused queues and the store's time when they were read (for their age; 0.0 when none is
    paused)."""

    pauses: tuple[QueuePause, ...]
    now: float

    def get(self, queue: str) -> QueuePause | None:
        """The pause of `queue`, or None when it is not paused."""
        return next((p for p in self.pauses if p.queue == queue), None)

    @property
    def names(self) -> frozenset[str]:
        """The paused queues' names."""
        return frozenset(p.queue for p in self.pauses)


#: One entry of a queue's audit trail (pause, resume, command_refused), its `subject` the queue:
#: an entry of the one shape every operators' audit trail but the jobs' has.
QueueEvent = AuditEntry


def queue_names(figures: Overview, state: QueueState) -> list[str]:
    """Every queue with jobs and every paused one, sorted: the rows `queue_figures` shows."""
    return sorted({*figures.queues, *state.names})


def queue_figures(figures: Overview, state: QueueState, names: Sequence[str] | None = None) -> dict[str, Any]:
    """The queues' figures as GET /api/v1/queues, `reliable queues list` and the console show them:
    every queue with jobs, and every paused one (or those of `names`: a page of them); throughput over
    the overview's window (jobs that reached a final state in it) and the failure rate
    (`failure_rate`); wait and run p50/p95 over the latency window (`latency`: job_stats.latency's
    figures of the queue, None before any was counted). Pure."""
    rows = []
    wanted = None if names is None else frozenset(names)
    counts: dict[str, dict[str, int]] = {}
    for (s, q), n in figures.counts.items():  # one pass, not one per queue (thousands of queues)
        if wanted is None or q in wanted:
            counts.setdefault(q, {})[s] = n
    for queue in queue_names(figures, state) if names is None else names:
        by_state = dict(sorted(counts.get(queue, {}).items()))
        oldest = figures.oldest_pending.get(queue)
        finished = sum(by_state.get(s.value, 0) for s in TERMINAL_STATES)
        # The outcomes the error-budget alerts count: bad = FAILED (in the window), DEAD and REVIEW (now),
        # good = SUCCEEDED (in the window); CANCELLED is an operator's choice, neither.
        failed = sum(by_state.get(s.value, 0) for s in FAILURE_STATES)
        outcomes = failed + by_state.get(JobStatus.SUCCEEDED.value, 0)
        pause = state.get(queue)
        rows.append({"queue": queue, "by_state": by_state,
                     "oldest_pending_at": oldest,
                     "oldest_pending_age_seconds": None if oldest is None else max(0.0, figures.now - oldest),
                     "finished": finished,
                     "throughput_per_hour": round(finished * 3600.0 / figures.window, 3) if figures.window else None,
                     "failure_rate": round(failed / outcomes, 4) if outcomes else None,
                     "paused": None if pause is None else {
                         **pause.as_dict(), "paused_seconds": max(0.0, state.now - pause.paused_at)},
                     "broker": None,  # RabbitMQ's depths: filled in where a broker is known (reliable.web.queues)
                     "latency": None if figures.latency is None else figures.latency.queues.get(queue)})
    return {"now": figures.now, "window_seconds": figures.window, "queues": rows,
            "latency_window_seconds": None if figures.latency is None else figures.latency.window}


def queue_name_problem(queue: str, *, blank: bool = False) -> str | None:
    """Why `queue` cannot be a queue's name (empty, too long, a control character), or None.
    `blank`: a name of spaces passes (registration does not judge names: the store may hold one)."""
    if not blank and not queue.strip():
        return "it is empty"
    return f"it is longer than {MAX_QUEUE_NAME} characters" if len(queue) > MAX_QUEUE_NAME else text_problem(queue)


def check_queue_name(queue: str) -> str:
    """`queue`, or ConfigError naming the field 'queue' when it cannot be a queue's name."""
    problem = queue_name_problem(queue)
    if problem is not None:
        raise ConfigError(f"field 'queue': {problem}")
    return queue


def paused(store: StateStore) -> QueueState:
    """Every paused queue, as one statement reads them (workers' caches and the console run it)."""
    rows = pause_queries.list_paused(store)
    now = float(rows[0].now) if rows else 0.0  # nothing paused: no age to compute, no second round trip
    return QueueState(tuple(QueuePause(str(r.queue), float(r.paused_at), str(r.operator), r.host, r.source,
                                       str(r.reason)) for r in rows), now)


def pause(store: StateStore, queue: str, *, reason: str | None, identity: Operator,
          operators: OperatorsPolicy | None = None) -> bool:
    """Pause `queue` as `identity` (audited); False when it was paused already (nothing written).
    NotAuthorized (audited as `command_refused`) unless the operators policy allows it."""
    return _set(store, queue, True, reason=reason, identity=identity, operators=operators)


def resume(store: StateStore, queue: str, *, reason: str | None, identity: Operator,
           operators: OperatorsPolicy | None = None) -> bool:
    """Resume `queue` as `identity` (audited); False when it was not paused (nothing written).
    Its deferred deliveries come back at their next try (within a deferral's delay)."""
    return _set(store, queue, False, reason=reason, identity=identity, operators=operators)


def events(store: StateStore, queue: str, *, limit: int = 20) -> list[QueueEvent]:
    """`queue`'s latest audit entries, oldest first."""
    rows = pause_queries.list_events(store, queue, limit)
    return [AuditEntry(int(r.id), str(r.queue), float(r.at), str(r.event), r.operator, r.host, r.source, r.reason,
                       json.loads(r.detail) if r.detail else {}) for r in reversed(rows)]


def _set(store: StateStore, queue: str, pausing: bool, *, reason: str | None, identity: Operator,
         operators: OperatorsPolicy | None) -> bool:
    command = "queues pause" if pausing else "queues resume"
    check_queue_name(queue)
    require_reason(command, reason)
    assert reason is not None
    policy = operators or OperatorsPolicy.allow_all()
    try:
        check_reason_text(command, reason)
        policy.check(identity.name, QUEUE_COMMANDS[command], queue, None)
    except (NotAuthorized, ConfigError) as exc:
        _event(store, queue, "command_refused", identity, escape_controls(reason),
               {"command": command, "why": str(exc)})
        raise
    with store.transaction() as unit:
        if pausing:
            changed = pause_queries.pause(unit, queue, operator=identity.name, host=identity.host,
                                          source=identity.source, reason=reason)
        else:
            changed = pause_queries.resume(unit, queue)
        if changed:
            _event(unit, queue, "pause" if pausing else "resume", identity, reason, None)
    return changed


def _event(executor: Executor, queue: str, event: str, identity: Operator, reason: str | None,
           detail: dict[str, Any] | None) -> None:
    pause_queries.add_event(executor, queue, event, operator=identity.name, host=identity.host,
                            source=identity.source, reason=reason, detail=json.dumps(detail) if detail else None)
