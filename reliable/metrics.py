"""Worker-side Prometheus metrics, derived from store events plus a few direct hooks.

`Metrics` is a StateStore listener (``store.add_listener(metrics)``): every committed event row
updates counters and histograms. The heartbeat thread calls `Metrics.heartbeat` and
`Metrics.heartbeat_failed` directly. Names follow Prometheus conventions: base units, ``_total``
counters, no ids as labels. Store-wide gauges (jobs by state, queue age, stuck jobs) are not
here: they come from `reliable.collector.StoreCollector` in the one exporter process.

Multiprocess mode (Dramatiq forks worker processes): prometheus_client writes every value to
per-process files of PROMETHEUS_MULTIPROC_DIR and ``reliable exporter`` adds them up.
``reliable worker`` sets it up by itself (`reliable.multiprocess`: a per-app directory the exporter
finds by its store); under plain ``dramatiq``, export the variable for the workers.
See docs/observability.md.

Collectors are created in `Metrics.__init__` on the injected registry, never at import. Two
Metrics on one registry share one set of collectors (a cache keyed by the registry object, weakly
held) instead of failing with "Duplicated timeseries".
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram

from .multiprocess import join
from .options import UNOWNED
from .states import (
    ACTIVE_STATES,
    ATTEMPT_ENDS,
    ATTEMPT_ENDS_IF_ACTIVE,
    FORCED_ENDS,
    LEASE_EXPIRIES,
    ONE_WRITE_RUNS,
    OPERATOR_EVENTS,
    WORKER_OUTCOMES,
    Event,
    JobStatus,
    target,
)

__all__ = ["ATTEMPT_OUTCOMES", "DURATION_BUCKETS", "LATENCY_BUCKETS", "Metrics", "setup_multiprocess"]

# Every set of event names below is derived from reliable.states: a new Event is counted as its
# kind says, never forgotten by a hand-written list.

#: Events that end an attempt (the `outcome` label), forced stops and cancels and lease expiries too.
ATTEMPT_OUTCOMES: frozenset[str] = frozenset(ev.value for ev in ATTEMPT_ENDS)
#: Another middleware's skips: they end an attempt when reliable had claimed the job (from RUNNING).
_ENDS_IF_ACTIVE = frozenset(ev.value for ev in ATTEMPT_ENDS_IF_ACTIVE)
_ACTIVE = frozenset(state.value for state in ACTIVE_STATES)
_CLAIM = Event.CLAIM.value
_ONE_WRITE = frozenset(ev.value for ev in ONE_WRITE_RUNS)

#: Job and attempt lengths: 5 ms up to one hour.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1200.0, 1800.0, 3600.0, float("inf"),
)
#: Waits and round trips: 1 ms up to one hour.
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
    900.0, 3600.0, float("inf"),
)

#: reliable_transitions_total: every event of the state machine, and a job's creation.
_TRANSITIONS = frozenset({"enqueued", *(ev.value for ev in Event)})
#: reliable_control_commands_total: an operator's event -> its command (a request counts as its command).
_COMMANDS = {ev.value: ev.value.removesuffix("_requested") for ev in OPERATOR_EVENTS}
#: reliable_recoveries_total: a recovery event -> its kind (every lease expiry is one kind).
_RECOVERY_KINDS = {**{ev.value: "lease_expired" for ev in LEASE_EXPIRIES}, Event.RETRY_DUE.value: "retry_due",
                   "redispatched": "redispatched"}
#: reliable_retries_total: an event that leaves the job waiting to retry -> its error_class label
#: (None: the event's own error class; a lease expiry's retry is labelled lease_expired).
_RETRIES: dict[str, str | None] = {ev.value: "lease_expired" if ev in LEASE_EXPIRIES else None
                                   for ev in Event if target(ev) is JobStatus.RETRY_WAIT}
_MEMORY = 10_000  # jobs remembered per process for checkpoint age and recovery time

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Collectors:
    transitions: Counter
    attempts: Counter
    lease_expiries: Counter
    stale_commits: Counter
    retries: Counter
    budget_exhausted: Counter
    duplicate_effects: Counter
    possible_duplicate_effects: Counter
    untrusted_options: Counter
    delivery_mismatches: Counter
    dead_letters: Counter
    review: Counter
    checkpoints: Counter
    control_commands: Counter
    forced_terminations: Counter
    recoveries: Counter
    heartbeat_failures: Counter
    lease_renewals: Counter
    leases_lost: Counter
    leases_held: Gauge
    attempt_duration: Histogram
    dispatch_latency: Histogram
    schedule_lateness: Histogram
    heartbeat_latency: Histogram
    recovery_seconds: Histogram
    checkpoint_age: Histogram
    workflow_transitions: Counter
    routed: Counter
    limit_deferrals: Counter
    actor_owner: Gauge


def _build(registry: CollectorRegistry) -> _Collectors:
    aq = ("actor", "queue")

    def counter(name: str, doc: str, labels: tuple[str, ...] = aq) -> Counter:
        return Counter(name, doc, labels, registry=registry)

    def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, doc, labels, registry=registry, buckets=buckets)

    return _Collectors(
        transitions=counter("reliable_transitions_total", "Job state transitions.",
                            ("event", "to_state", "actor", "queue")),
        attempts=counter("reliable_attempts_total", "Attempts ended, by the event that ended them.",
                         ("actor", "queue", "outcome")),
        lease_expiries=counter("reliable_lease_expiries_total", "Attempts whose lease expired (worker lost)."),
        stale_commits=counter("reliable_stale_commits_total", "Writes refused because the lease had moved on."),
        retries=counter("reliable_retries_total", "Retries scheduled.", ("actor", "queue", "error_class")),
        budget_exhausted=counter("reliable_retry_budget_exhausted_total",
                                 "Failures that found the retry budget exhausted."),
        duplicate_effects=counter("reliable_duplicate_effects_total", "Replayed operation keys detected."),
        possible_duplicate_effects=counter(
            "reliable_possible_duplicate_effects_total",
            "Units recorded for the first time after an earlier attempt applied them without a record."),
        untrusted_options=counter("reliable_untrusted_options_total",
                                  "Messages whose options tried to set the job contract or name code (ignored)."),
        delivery_mismatches=counter("reliable_delivery_mismatches_total",
                                    "Deliveries refused because they are not their job's message: another actor, "
                                    "other arguments or options (dead-lettered, not run)."),
        dead_letters=counter("reliable_dead_letters_total", "Jobs moved to DEAD."),
        review=counter("reliable_review_total", "Jobs moved to REVIEW."),
        checkpoints=counter("reliable_checkpoints_total", "Checkpoints written."),
        control_commands=counter("reliable_control_commands_total", "Operator commands applied.", ("command",)),
        forced_terminations=counter("reliable_forced_terminations_total",
                                    "STOPPING jobs terminated after their grace period."),
        recoveries=counter("reliable_recoveries_total", "Recovery actions.", ("kind",)),
        heartbeat_failures=counter("reliable_heartbeat_failures_total", "Heartbeats that could not reach the store.",
                                   ()),
        lease_renewals=counter("reliable_lease_renewals_total", "Leases renewed by heartbeats.", ()),
        leases_lost=counter("reliable_leases_lost_total", "Leases a heartbeat found lost.", ()),
        leases_held=Gauge("reliable_leases_held", "Leases held by live worker processes at their last heartbeat.",
                          registry=registry, multiprocess_mode="livesum"),
        attempt_duration=histogram("reliable_attempt_duration_seconds", "Attempt length, claim to end.",
                                   ("actor", "queue", "outcome"), DURATION_BUCKETS),
        dispatch_latency=histogram("reliable_dispatch_latency_seconds",
                                   "From the time a PENDING job was due to its claim.", aq, LATENCY_BUCKETS),
        schedule_lateness=histogram("reliable_schedule_lateness_seconds",
                                    "From retry_at to the claim of a RETRY_WAIT job.", aq, LATENCY_BUCKETS),
        heartbeat_latency=histogram("reliable_heartbeat_latency_seconds", "Duration of one heartbeat statement.",
                                    (), LATENCY_BUCKETS),
        recovery_seconds=histogram("reliable_recovery_seconds", "From a recovery action to the job's next claim.",
                                   ("kind",), LATENCY_BUCKETS),
        checkpoint_age=histogram("reliable_checkpoint_age_seconds",
                                 "Time since the previous checkpoint (or the attempt's start).", aq,
                                 DURATION_BUCKETS),
        workflow_transitions=counter("reliable_workflow_transitions_total",
                                     "Workflow status changes, by the status reached.", ("to_status",)),
        routed=counter("reliable_retries_routed_total",
                       "Jobs moved to another queue by a routed retry (or back by a restart), by the queue "
                       "left and the queue reached.", ("actor", "queue", "to_queue")),
        limit_deferrals=counter("reliable_limit_deferrals_total",
                                "Deliveries deferred by a concurrency or rate limit (reliable.limits).",
                                ("actor", "queue", "limit")),
        # An info series (always 1): PromQL alerts join their `owner` label from it (alerts/promql.py).
        # One per tracked actor: as bounded as the actor label. livemax: a dead process's value goes.
        actor_owner=Gauge("reliable_actor_owner", "The team owning each tracked actor's jobs (the actor's `owner` "
                          "option; \"unowned\" without one): always 1.", ("actor", "queue", "owner"),
                          registry=registry, multiprocess_mode="livemax"),
    )


def _counted(c: _Collectors) -> dict[str, tuple[Counter, ...]]:
    """Event name -> the counters labelled (actor, queue) it adds one to (by its kind, from states)."""
    counted: dict[str, tuple[Counter, ...]] = {
        "checkpoint": (c.checkpoints,), "stale_commit_rejected": (c.stale_commits,),
        "duplicate_effect": (c.duplicate_effects,), "possible_duplicate_effect": (c.possible_duplicate_effects,),
        "untrusted_options_ignored": (c.untrusted_options,), "delivery_mismatch": (c.delivery_mismatches,),
    }
    for ev in Event:
        kinds = ((c.lease_expiries, ev in LEASE_EXPIRIES), (c.forced_terminations, ev in FORCED_ENDS),
                 (c.dead_letters, target(ev) is JobStatus.DEAD), (c.review, target(ev) is JobStatus.REVIEW))
        if counters := tuple(counter for counter, applies in kinds if applies):
            counted[ev.value] = counters
    return counted


_cache: weakref.WeakKeyDictionary[CollectorRegistry, _Collectors] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def _collectors_for(registry: CollectorRegistry) -> _Collectors:
    with _cache_lock:
        found = _cache.get(registry)
        if found is None:
            found = _cache[registry] = _build(registry)
        return found


def _label(value: Any, default: str = "unknown") -> str:
    return str(value) if value not in (None, "") else default


def _seconds(end: Any, start: Any) -> float | None:
    if end is None or start is None:
        return None
    return max(0.0, float(end) - float(start))


class _Recent:
    """A bounded insertion-ordered map: per-process memory that cannot grow without limit."""

    def __init__(self, size: int) -> None:
        self._items: OrderedDict[str, tuple[Any, float]] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def put(self, key: str, tag: Any, at: float) -> None:
        with self._lock:
            self._items[key] = (tag, at)
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def get(self, key: str) -> tuple[Any, float] | None:
        with self._lock:
            return self._items.get(key)

    def pop(self, key: str) -> tuple[Any, float] | None:
        with self._lock:
            return self._items.pop(key, None)

    def __bool__(self) -> bool:
        return bool(self._items)


class _Batch(threading.local):
    """This thread's counter increments held by `Metrics.together` (None: outside it, written at once)."""

    counts: dict[Any, int] | None = None  # a class default: no AttributeError raised per read


@dataclass(slots=True)
class _Plan:
    """What every event of one (event, from_status, to_status, actor, queue) updates (`Metrics._plan`).

    Its histogram's child is created at its first observation (`Metrics._timed`): creating it
    exports its series (at 0), which an event without the times to observe must not do."""

    counts: tuple[Any, ...]  # the counter children it adds one to
    #: The histogram and labels of `at - since`: an attempt's duration (since its start) or a
    #: claim's dispatch latency or schedule lateness (since it was due); None: none.
    histogram: tuple[Any, tuple[str, ...]] | None
    since: str  # the event's field the histogram measures from (a claim: then dispatched_at)
    claim: bool  # a claim (else an attempt's end, when `histogram`)
    actor: str
    queue: str
    name: str
    recovery: str | None  # the recovery kind it counts (None: not a recovery)
    retry_default: bool  # a retry labelled by the event's own error class
    rare: bool  # `Metrics._rare` has more to do than the detail says
    child: Any = None  # the histogram's child, once created


class Metrics:
    """The worker-side collectors, updated from store events (`__call__`) and heartbeat hooks.

    Parameters:
      registry: where to register the collectors (default: prometheus_client's global REGISTRY).
        In multiprocess mode the registry only matters for tests: values go to the files in
        PROMETHEUS_MULTIPROC_DIR and the exporter reads them from there.

    Definitions:
      - attempt duration: ``at - started_at`` of the event ending the attempt (for lease_expired*
        it includes the time until recovery noticed the expiry).
      - dispatch latency: on a claim from PENDING, ``at - scheduled_at``: scheduled_at is when the
        job became due (enqueue, its eta, or the resume/restart/recovery that re-queued it). A
        sweeper re-publish does not reset it, so lost messages show up as latency.
      - schedule lateness: on a claim from RETRY_WAIT, ``at - scheduled_at`` (scheduled_at = retry_at).
      - checkpoint age: on a checkpoint, the time since this attempt's previous checkpoint seen by
        this process, or since the attempt started.
      - recovery seconds: from a recovery event (lease_expired*, retry_due, redispatched) to the
        job's next claim, when this process saw both (e.g. recovery running in the workers, or one
        process); otherwise not observed. reliable_recoveries_total counts every recovery event.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else REGISTRY
        self._c = _collectors_for(self.registry)
        self._last_checkpoint = _Recent(_MEMORY)
        self._recovered = _Recent(_MEMORY)
        # The labelled children already used: `labels()` validates and locks on every call, and a
        # job's events pass here two to three times (as bounded as the series themselves).
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self._counted = _counted(self._c)
        # Per (event, from_status, to_status, actor, queue): as bounded as the series.
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self._batch = _Batch()

    def _of(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, looked up once per series."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    # -- direct hooks ------------------------------------------------------------------------------

    def track(self, actor: str, queue: str, retried: Iterable[str] = (), owner: str | None = None) -> None:
        """Create the series of a tracked actor at 0 before its first event, and name its `owner`.

        A labelled counter otherwise appears at its first increment, at 1, and `increase(x[5m]) > 0`
        or a rate cannot see that first event. Created: every counter labelled by actor and queue,
        the transitions and attempts of each worker outcome, the dispatch latency histogram, and the
        retries of each error class in `retried` (the policy's classes that retry) and of lease expiry.
        ``reliable_actor_owner{actor,queue,owner}`` is set to 1 (owner "unowned" when None): the owner
        the PromQL alerts about this actor carry.
        """
        c = self._c
        c.actor_owner.labels(actor, queue, owner or UNOWNED).set(1)
        for counter in (c.lease_expiries, c.stale_commits, c.budget_exhausted, c.duplicate_effects,
                        c.possible_duplicate_effects, c.untrusted_options, c.delivery_mismatches, c.dead_letters,
                        c.review, c.checkpoints, c.forced_terminations):
            counter.labels(actor, queue)
        for event in sorted(WORKER_OUTCOMES):
            c.transitions.labels(event.value, target(event).value, actor, queue)
            c.attempts.labels(actor, queue, event.value)
        c.dispatch_latency.labels(actor, queue)
        for error_class in {*retried, "lease_expired"}:
            c.retries.labels(actor, queue, error_class)

    def heartbeat(self, latency: float, renewed: int, lost: int) -> None:
        """Record one heartbeat: its latency (s), how many leases it renewed and found lost."""
        c = self._c
        if renewed or lost:  # an idle beat sends no query: no latency to observe
            c.heartbeat_latency.observe(max(0.0, latency))
        if renewed:
            c.lease_renewals.inc(renewed)
        if lost:
            c.leases_lost.inc(lost)
        c.leases_held.set(renewed)

    def workflow_transition(self, workflow_id: str, from_status: str, to_status: str) -> None:
        """Count a workflow's status change (reliable.workflows.engine calls it after the commit)."""
        self._of(self._c.workflow_transitions, to_status).inc()

    def limit_deferred(self, actor: str, queue: str, limit: str) -> None:
        """A delivery of `actor` was deferred by its `limit` ("concurrency" or "rate")."""
        self._of(self._c.limit_deferrals, actor, queue, limit).inc()

    def heartbeat_failed(self) -> None:
        """Record a heartbeat that could not reach the store."""
        self._c.heartbeat_failures.inc()

    # -- store listener ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Around events fed in one go by this thread (a group-commit batch's callbacks,
        StoreCore.scope_submitted_callbacks): their counters are added up and each written once,
        when the scope ends, instead of once per event (a multiprocess value takes a lock, checks
        the pid and writes its file at each increment). Histograms still observe each value at
        once. Nested scopes write at the outermost's end. Never raises."""
        batch = self._batch
        if batch.counts is not None:
            yield
            return
        counts: dict[Any, int] = {}
        batch.counts = counts
        try:
            yield
        finally:
            batch.counts = None
            for child, amount in counts.items():
                try:
                    child.inc(amount)
                except Exception:  # a value file that cannot be written: the others still are
                    logger.exception("metrics: could not add %d to %r", amount, child)

    def _inc(self, child: Any) -> None:
        counts = self._batch.counts
        if counts is None:
            child.inc()
        else:
            counts[child] = counts.get(child, 0) + 1

    def __call__(self, event: Mapping[str, Any]) -> None:
        """Update the metrics from one committed event row (see StateStore.add_listener)."""
        get = event.get
        key = (get("event"), get("from_status"), get("to_status"), get("actor"), get("queue"))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self._plan(*key)
        counts = self._batch.counts
        if counts is None:
            for child in plan.counts:
                child.inc()
        else:
            for child in plan.counts:
                counts[child] = counts.get(child, 0) + 1
        if plan.histogram is not None:  # a claim or an attempt's end
            self._timed(get, plan)
        if plan.rare or get("detail"):  # most events: detail {}
            self._rare(event, plan)

    def _timed(self, get: Callable[[str], Any], plan: _Plan) -> None:
        """A claim's or an attempt end's histogram (`get`: the event's), and what this process
        remembers of the job."""
        at, since = get("at"), get(plan.since)
        if since is None and plan.claim:
            since = get("dispatched_at")
        seconds = _seconds(at, since)
        if seconds is not None and plan.histogram is not None:
            child = plan.child
            if child is None:
                child = plan.child = self._of(plan.histogram[0], *plan.histogram[1])
            child.observe(seconds)
        if plan.claim:
            if self._recovered:  # most claims: no recovery seen by this process
                recovered = self._recovered.pop(str(get("job_id")))
                if recovered is not None and at is not None:
                    self._of(self._c.recovery_seconds, recovered[0]).observe(max(0.0, float(at) - recovered[1]))
        elif self._last_checkpoint:  # most attempts: no checkpoint seen by this process
            self._last_checkpoint.pop(f"{get('job_id')}:{get('lease_id')}")

    def _plan(self, name: Any, from_status: Any, to_status: Any, actor: Any, queue: Any) -> _Plan:
        """What an event of this name, statuses, actor and queue updates: the same for all such events."""
        name = str(name or "")
        actor, queue = _label(actor), _label(queue)
        c, of = self._c, self._of
        counts = []
        if name in _TRANSITIONS:
            counts.append(of(c.transitions, name, _label(to_status), actor, queue))
        histogram: tuple[Any, tuple[str, ...]] | None = None
        ended = name in ATTEMPT_OUTCOMES or (name in _ENDS_IF_ACTIVE and from_status in _ACTIVE)
        if ended:
            counts.append(of(c.attempts, actor, queue, name))
            if name not in _ONE_WRITE:  # no claim recorded when the run started: its length is unknown here
                histogram = (c.attempt_duration, (actor, queue, name))
        counts.extend(of(counter, actor, queue) for counter in self._counted.get(name, ()))
        retry_class = _RETRIES.get(name)
        if retry_class is not None:
            counts.append(of(c.retries, actor, queue, retry_class))
        if name in _COMMANDS:
            counts.append(of(c.control_commands, _COMMANDS[name]))
        recovery = _RECOVERY_KINDS.get(name)
        if recovery is not None:
            counts.append(of(c.recoveries, recovery))
        if name == _CLAIM:
            histogram = (c.schedule_lateness if from_status == JobStatus.RETRY_WAIT else c.dispatch_latency,
                         (actor, queue))
        claim = name == _CLAIM
        return _Plan(counts=tuple(counts), histogram=histogram, since="scheduled_at" if claim else "started_at",
                     claim=claim, actor=actor, queue=queue, name=name, recovery=recovery,
                     retry_default=name in _RETRIES and retry_class is None,
                     rare=name in ("checkpoint", "routed") or recovery is not None or name in _RETRIES)

    def _rare(self, event: Mapping[str, Any], plan: _Plan) -> None:
        """The parts that depend on more than the plan's key (error class, detail, job id)."""
        c, actor, queue = self._c, plan.actor, plan.queue
        if plan.retry_default:
            self._inc(self._of(c.retries, actor, queue, _label(event.get("error_class"), "none")))
        if plan.name == "checkpoint":
            self._checkpointed(event, actor, queue)
        detail = event.get("detail") or {}
        if plan.name == "routed" and isinstance(detail, Mapping):
            self._inc(self._of(c.routed, actor, _label(detail.get("from")), queue))
        if detail and isinstance(detail, Mapping) and detail.get("budget_exhausted"):
            self._inc(self._of(c.budget_exhausted, actor, queue))
        if plan.recovery is not None:
            at = event.get("at")
            if at is not None and event.get("job_id") is not None:
                self._recovered.put(str(event["job_id"]), plan.recovery, float(at))

    def _checkpointed(self, event: Mapping[str, Any], actor: str, queue: str) -> None:
        at = event.get("at")
        key = f"{event.get('job_id')}:{event.get('lease_id')}"
        previous = self._last_checkpoint.get(key)
        age = _seconds(at, previous[1] if previous else event.get("started_at"))
        if age is not None:
            self._of(self._c.checkpoint_age, actor, queue).observe(age)
        if at is not None:
            self._last_checkpoint.put(key, None, float(at))


def setup_multiprocess(path: str) -> None:
    """Prepare prometheus_client's multiprocess mode in an EMPTIED `path`: for a process manager of
    your own. `reliable worker` needs none of it (see `reliable.multiprocess`).

    Call it ONCE, in the parent process, before the worker processes start (never from a worker:
    it would delete the live files of its siblings). It removes only ``*.db`` files (the ones
    prometheus_client writes), then `reliable.multiprocess.join`s the directory: the variable is set
    for this process and its children, and collectors created from then on write there.
    """
    directory = Path(path)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)
    join(directory)
