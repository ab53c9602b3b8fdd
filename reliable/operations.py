"""Bulk commands as named operations: count, confirm, then run with progress, a rate limit and cancellation.

    preview  the filter is counted NOW and the matching job ids are kept in the row; the caller
             gets a confirmation token (only its sha256 is stored) valid `confirm_ttl` seconds
    confirm  the creator (or an admin) presents the token; a daemon thread runs the command on
             exactly the counted jobs, `rate` per second, through the confirmer's `Control`
             (which authorizes and audits each job; every event carries the operation id)
    run      progress (done, counts, results) is written every `flush_every` jobs or
             `flush_interval` seconds, which is also the run's heartbeat (`updated_at`);
             `cancel_requested` is read between jobs; it ends `finished` or `cancelled`

Statuses: refused (a principal that may not act at all asked: kept for the audit trail),
awaiting_confirmation, expired (not confirmed in time), running, finished, cancelled, failed (the
run itself broke: the store went away...) and interrupted: a `running` row whose heartbeat is older
than `stale_after` seconds plus one rate interval (the serving process died). Expired and
interrupted rows are marked when they are next read. No web import: the API and console share it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import logging
import secrets
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from .bulk import RateLimiter
from .control import RESOLUTIONS, CommandResult, Control, check_reason_text, require_reason
from .errors import (
    ConfigError,
    ControlRefused,
    NotAuthorized,
    OperationNotFound,
    ReliableError,
    StoreError,
    client_message,
)
from .operators import COMMANDS, SYNONYMS
from .redact import MASK
from .store import StateStore
from .store.bulk_operations import (
    ENDED_OPERATION_STATUSES,
    OPERATION_COLUMNS,
    cancel_preview,
    cancel_requested,
    confirm_token_hash,
    count_to_act_on,
    insert_operation,
    jobs_to_act_on,
    mark_operation,
    operation_row,
    recent_operation_rows,
    request_cancel,
    start_operation,
    write_progress,
)
from .store.records import home_queue_of
from .store.selection import JobFilter, Reader, jobs_with_ids

__all__ = ["ACTIVE_STATUSES", "ALIASES", "OPTIONS", "STATUSES", "Operation", "Operations", "Preview", "counted_digest"]

logger = logging.getLogger("reliable.operations")

#: Other names a bulk command may be given by.
ALIASES: Mapping[str, str] = SYNONYMS

#: The options each command takes (any other option is refused).
OPTIONS: Mapping[str, frozenset[str]] = {
    "reconcile": frozenset({"resolution"}),
    "restart": frozenset({"allow_duplicate_side_effects"}),
    "requeue": frozenset({"allow_duplicate_side_effects"}),
}

_SAMPLE = 20
_ENDED = ENDED_OPERATION_STATUSES
#: Every status an operation can have; the first two are not over yet.
ACTIVE_STATUSES: tuple[str, ...] = ("awaiting_confirmation", "running")
STATUSES: tuple[str, ...] = (*ACTIVE_STATUSES, *_ENDED, "dry_run")  # a dry run is never stored


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def counted_digest(job_ids: Sequence[str]) -> str:
    """The sha256 (hex) of counted job ids, in the order counted (`Operation.counted_digest`)."""
    return hashlib.sha256("\n".join(job_ids).encode()).hexdigest()


@dataclass(frozen=True)
class Operation:
    """A bulk operation as stored (never its confirmation token).

    counts: jobs per outcome so far (done, requested, refused); counts_by_state: the counted jobs
    per state at preview; results: one entry per job acted on (job_id, outcome, message, hint...);
    would_refuse: at preview, the counted jobs the command would refuse, grouped by why (each
    `{"why", "count", "hint"}`), decided by the command's own dry run on each job.
    """

    operation_id: str
    command: str
    filter: dict[str, Any]
    job_ids: tuple[str, ...]
    options: dict[str, Any]
    reason: str
    operator: str
    source: str | None
    status: str
    total: int
    done: int
    counts: dict[str, int]
    counts_by_state: dict[str, int]
    results: list[dict[str, Any]]
    rate: float | None
    created_at: float
    expires_at: float
    confirmed_at: float | None = None
    confirmed_by: str | None = None
    finished_at: float | None = None
    cancel_requested: bool = False
    cancelled_by: str | None = None
    updated_at: float | None = None
    error: str | None = None
    would_refuse: tuple[dict[str, Any], ...] = ()

    @property
    def ended(self) -> bool:
        """Whether nothing more will happen to it."""
        return self.status in _ENDED

    @property
    def refused_at_preview(self) -> int:
        """How many counted jobs the command would refuse, as the preview found them."""
        return sum(int(group["count"]) for group in self.would_refuse)

    @property
    def counted_digest(self) -> str:
        """The sha256 of the counted job ids (in order): what a confirmation without the token must
        carry, so it confirms exactly the set the confirmer was shown (`Operations.confirm_counted`)."""
        return counted_digest(self.job_ids)

    @property
    def changes_nothing(self) -> bool:
        """Whether the preview found every counted job refused (or none counted): confirming it would
        change nothing as the jobs stood then, so the console offers no confirmation (the API's
        caller decides: a job may have moved since)."""
        return self.refused_at_preview >= self.total

    @property
    def all_refused(self) -> bool:
        """Whether it acted on jobs and every one of them was refused (nothing changed)."""
        return self.done > 0 and self.counts.get("refused", 0) == self.done

    @property
    def hints(self) -> list[str]:
        """The distinct advice its refusals carry (shown once, not on every job's row)."""
        found = [group.get("hint") for group in self.would_refuse] + [r.get("hint") for r in self.results]
        return list(dict.fromkeys(hint for hint in found if hint))

    @classmethod
    def from_row(cls, row: Any) -> Operation:
        """From a `reliable_operations` row."""
        counts = json.loads(row.counts) if row.counts else {}
        return cls(row.operation_id, row.command, json.loads(row.filter), tuple(json.loads(row.job_ids)),
                   json.loads(row.options), row.reason, row.operator, row.source, row.status, row.total, row.done,
                   dict(counts.get("by_outcome", {})), dict(counts.get("by_state", {})),
                   json.loads(row.results) if row.results else [], row.rate, row.created_at, row.expires_at,
                   row.confirmed_at, row.confirmed_by, row.finished_at, bool(row.cancel_requested),
                   row.cancelled_by, row.updated_at, row.error, tuple(counts.get("would_refuse", ())))

    def as_dict(self, *, full: bool = True) -> dict[str, Any]:
        """JSON-ready; `full` adds every counted job id and every result (a listing leaves them out)."""
        data: dict[str, Any] = {
            "operation_id": self.operation_id, "command": self.command, "filter": self.filter,
            "options": self.options, "reason": self.reason, "operator": self.operator, "source": self.source,
            "status": self.status, "total": self.total, "done": self.done, "counts": self.counts,
            "counts_by_state": self.counts_by_state, "rate": self.rate, "created_at": self.created_at,
            "expires_at": self.expires_at, "confirmed_at": self.confirmed_at, "confirmed_by": self.confirmed_by,
            "finished_at": self.finished_at, "cancel_requested": self.cancel_requested,
            "cancelled_by": self.cancelled_by, "updated_at": self.updated_at, "error": self.error,
            "sample": list(self.job_ids[:_SAMPLE]), "would_refuse": self.refused_at_preview,
            "counted_digest": self.counted_digest, "changes_nothing": self.changes_nothing,
            "expired": self.status == "expired",
            "refusals": list(self.would_refuse), "all_refused": self.all_refused,
        }
        if full:
            data["job_ids"] = list(self.job_ids)
            data["results"] = self.results
        return data


@dataclass(frozen=True)
class Preview:
    """A counted operation awaiting confirmation, its token (shown once) and what the policy will refuse."""

    operation: Operation
    confirm_token: str
    not_permitted: int = 0

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the operation, the token, a sample of the jobs and their states."""
        return {**self.operation.as_dict(full=False), "confirm_token": self.confirm_token,
                "not_permitted": self.not_permitted}


def _counts(by_state: Mapping[str, int], by_outcome: Mapping[str, int],
            would_refuse: Sequence[Mapping[str, Any]]) -> str:
    """The stored `counts` column (one shape, written at preview, confirmation and each flush)."""
    return json.dumps({"by_state": by_state, "by_outcome": by_outcome, "would_refuse": list(would_refuse)})


@dataclass
class _Progress:
    by_state: dict[str, int]
    would_refuse: tuple[dict[str, Any], ...] = ()
    done: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    results: list[dict[str, Any]] = field(default_factory=list)

    def add(self, entry: dict[str, Any]) -> None:
        self.done += 1
        self.counts[entry["outcome"]] = self.counts.get(entry["outcome"], 0) + 1
        self.results.append(entry)


class _Stop(Exception):
    """The operation was cancelled while the rate limiter waited."""


class Operations:
    """Bulk operations kept in a StateStore; one instance per serving process (it owns the run threads).

    bulk_max: the most jobs one operation may count; bulk_rate: the default and highest rate (jobs/s);
    confirm_ttl: seconds a preview waits for its confirmation; stale_after: seconds without a heartbeat
    (plus one rate interval) after which a running operation counts as interrupted. `clock` and
    `sleep` pace the runs (injectable so tests need not wait).
    """

    def __init__(self, store: StateStore, *, bulk_max: int = 10_000, bulk_rate: float = 20.0,
                 confirm_ttl: float = 300.0, stale_after: float = 60.0, flush_every: int = 50,
                 flush_interval: float = 0.5, clock: Callable[[], float] | None = None,
                 sleep: Callable[[float], None] | None = None) -> None:
        self.store = store
        self.bulk_max = bulk_max
        self.bulk_rate = bulk_rate
        self.confirm_ttl = confirm_ttl
        self.stale_after = stale_after
        self.flush_every = flush_every
        self.flush_interval = flush_interval
        self._clock = clock or time.monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._threads: dict[str, threading.Thread] = {}
        self._wakes: dict[str, threading.Event] = {}

    # -- preview ---------------------------------------------------------------------------------

    def preview(self, control: Control, command: str, flt: JobFilter, *, reason: str | None,
                options: Mapping[str, Any] | None = None, rate: float | None = None,
                dry_run: bool = False) -> Preview:
        """Count the jobs `flt` matches for `command` and keep their ids, awaiting confirmation.

        Only the jobs `control`'s operator may act on are counted, sampled and kept (its scope, the
        jobs whose arguments it sees: `Control.reader`); `not_permitted` says how many of those
        its policy will refuse this command on. Every front end (the API, the console's bulk form,
        the CLI's `--api`) previews through here.

        `dry_run`: count only; nothing is stored (the operation's status is `dry_run`, it has no
        token and cannot be confirmed).

        Raises ConfigError (unknown command or option, no narrowing filter, too many jobs, bad rate),
        ReasonRequired, or NotAuthorized when `control`'s operator may run no command at all, or
        searches arguments without the right to (`Reader.check`); a refusal is recorded as a
        `refused` operation, a dry run's too.
        """
        name = ALIASES.get(command, command)
        if name not in COMMANDS:
            raise ConfigError(f"unknown command {command!r} (known: {', '.join(sorted(COMMANDS))}; aliases: "
                              f"{', '.join(f'{a} ({c})' for a, c in sorted(ALIASES.items()))})")
        require_reason(name, reason)
        check_reason_text(name, reason)
        assert reason is not None
        opts = self._options(name, options or {})
        rate = self._rate(rate)
        identity = control.identity
        now = self.store.now()
        row: dict[str, Any] = {
            "operation_id": secrets.token_hex(8), "command": name, "filter": json.dumps(flt.as_dict()),
            "options": json.dumps(opts), "reason": reason, "operator": identity.name, "source": identity.source,
            "rate": rate, "created_at": now, "updated_at": now,
        }
        if not control.operators.may_act(identity.name):
            refusal = NotAuthorized(f"{identity.name!r} may run no command (a read-only role): bulk {name} refused")
            self._refuse(row, refusal)
            raise refusal
        if flt.is_empty:
            raise ConfigError("a bulk operation needs a filter that narrows the jobs (state, queue, actor, ids...)")
        reader = control.reader
        try:
            found = jobs_to_act_on(self.store, flt, reader=reader, now=now, limit=self.bulk_max + 1)
        except NotAuthorized as refusal:  # a search over arguments it may not see: a guess, kept for the audit
            self._refuse(row, refusal)
            raise
        if len(found) > self.bulk_max:
            raise ConfigError(f"the filter matches {count_to_act_on(self.store, flt, reader=reader, now=now)} jobs, "
                              f"more than one operation may act on ({self.bulk_max}, bulk_max): "
                              "narrow it")
        by_state: dict[str, int] = {}
        for job in found:
            by_state[job.status] = by_state.get(job.status, 0) + 1
        not_permitted = sum(1 for job in found
                            if not control.operators.allows(identity.name, name, home_queue_of(job.queue, job.message),
                                                            job.owner))
        would_refuse = self._would_refuse(control, name, [job.job_id for job in found], reason, opts)
        counted = {**row, "job_ids": json.dumps([job.job_id for job in found]), "total": len(found),
                   "expires_at": now + self.confirm_ttl, "counts": _counts(by_state, {}, would_refuse)}
        if dry_run:
            unstored = {**dict.fromkeys(OPERATION_COLUMNS), **counted, "status": "dry_run", "done": 0,
                        "cancel_requested": False}
            return Preview(Operation.from_row(SimpleNamespace(**unstored)), "", not_permitted)
        token = secrets.token_urlsafe(24)
        self._insert({**counted, "status": "awaiting_confirmation", "confirm_token_hash": _hash(token)})
        return Preview(self.get(row["operation_id"]), token, not_permitted)

    def _refuse(self, row: Mapping[str, Any], refusal: NotAuthorized) -> None:
        """Record a refused preview (a dry run's too: the asking is what the audit trail keeps)."""
        now = row["created_at"]
        self._insert({**row, "job_ids": "[]", "status": "refused", "total": 0, "expires_at": now,
                      "error": str(refusal), "finished_at": now})

    def _would_refuse(self, control: Control, command: str, job_ids: Sequence[str], reason: str,
                      options: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The run's own rule, applied now as a dry run of the command on each job (nothing is
        written or audited): the refusals grouped by why, most frequent first."""
        method = getattr(control, command)
        groups: dict[str, dict[str, Any]] = {}
        for job_id in job_ids:
            entry = self._one(method, job_id, reason, {**options, "dry_run": True})
            if entry["outcome"] not in ("refused", "error"):
                continue
            why = str(entry["message"]).removeprefix(f"job {job_id}: ")
            group = groups.setdefault(why, {"why": why, "count": 0, "hint": entry.get("hint")})
            group["count"] += 1
        return sorted(groups.values(), key=lambda group: -int(group["count"]))

    def _options(self, command: str, options: Mapping[str, Any]) -> dict[str, Any]:
        allowed = OPTIONS.get(command, frozenset())
        for key in sorted(set(options) - allowed):
            raise ConfigError(f"{command} takes no option {key!r}"
                              + (f" (it takes: {', '.join(sorted(allowed))})" if allowed else ""))
        opts = dict(options)
        if command == "reconcile" and opts.get("resolution") not in RESOLUTIONS:
            raise ConfigError(f"reconcile needs options.resolution 'succeeded' or 'cancelled', "
                              f"not {opts.get('resolution')!r}")
        if "allow_duplicate_side_effects" in opts and not isinstance(opts["allow_duplicate_side_effects"], bool):
            raise ConfigError("options.allow_duplicate_side_effects must be true or false")
        return opts

    def _rate(self, rate: float | None) -> float:
        if rate is None:
            return self.bulk_rate
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 < rate <= self.bulk_rate:
            raise ConfigError(f"rate must be a number of jobs per second above 0 and at most {self.bulk_rate:g} "
                              f"(bulk_rate), not {rate!r}")
        return float(rate)

    def _insert(self, row: Mapping[str, Any]) -> None:
        insert_operation(self.store, row)

    # -- reading ---------------------------------------------------------------------------------

    def get(self, operation_id: str) -> Operation:
        """The operation; OperationNotFound if there is none."""
        return self._settle([self._load(operation_id)])[0]

    def _load(self, operation_id: str) -> Operation:
        row = operation_row(self.store, operation_id)
        if row is None:
            raise OperationNotFound(operation_id)
        return Operation.from_row(row)

    def as_seen_by(self, op: Operation, reader: Reader) -> Operation:
        """`op` as `reader` may see it. An operation that searched arguments tells, by its ids, which
        jobs' arguments hold its text: to a reader who may not search (`Reader.may_search`), its text
        is masked and only the ids of jobs in the reader's scope (`Reader.covers`) are kept, with
        their results; a job gone since (pruned) is left out. Every front end shows operations so."""
        if not op.filter.get("search") or reader.may_search:
            return op
        known = jobs_with_ids(self.store, op.job_ids, reader=Reader.trusted("bulk operations"))
        kept = {job.job_id for job in known if reader.covers(home_queue_of(job.queue, job.message), job.owner)}
        return dataclasses.replace(op, filter={**op.filter, "search": MASK},
                                   job_ids=tuple(job_id for job_id in op.job_ids if job_id in kept),
                                   results=[entry for entry in op.results if entry.get("job_id") in kept])

    def recent(self, *, limit: int = 50) -> list[Operation]:
        """The most recent operations, newest first, without their job ids and results (a listing:
        those grow with the operation; `get` reads them)."""
        rows = recent_operation_rows(self.store, limit=limit)
        return self._settle([Operation.from_row(row) for row in rows])

    def _settle(self, found: Sequence[Operation]) -> list[Operation]:
        """Mark expired previews and interrupted runs (reads stay read-only unless one is due)."""
        if not any(op.status in ("awaiting_confirmation", "running") for op in found):
            return list(found)
        now = self.store.now()
        out = []
        for op in found:
            if op.status == "awaiting_confirmation" and op.expires_at <= now:
                op = self._mark(op, "expired", "not confirmed within confirm_ttl: preview it again", now)
            elif op.status == "running" and not self._alive(op.operation_id) and \
                    (op.updated_at or 0) < now - self.stale_after - 1.0 / (op.rate or self.bulk_rate):
                op = self._mark(op, "interrupted", "the process running it stopped (no heartbeat since "
                                "updated_at); `results` lists the jobs recorded as done", now)
            out.append(op)
        return out

    def _mark(self, op: Operation, status: str, error: str, now: float) -> Operation:
        mark_operation(self.store, op.operation_id, was=op.status, updated_at=op.updated_at, status=status,
                       error=error, at=now)
        return self._load(op.operation_id)

    def _alive(self, operation_id: str) -> bool:
        with self._lock:
            thread = self._threads.get(operation_id)
        return thread is not None and thread.is_alive()

    # -- confirm and cancel ----------------------------------------------------------------------

    def confirm(self, operation_id: str, token: str, control: Control, *, admin: bool = False) -> Operation:
        """Start the run (a daemon thread) and return at once, the operation `running`.

        Only its creator, or an `admin`, may confirm (NotAuthorized); a wrong token, an expired
        preview or a second confirmation is refused (ControlRefused). Each job is acted on as
        `control`'s operator, whose operators policy Control enforces and audits per job.
        """
        def token_matches(op: Operation) -> bool:
            stored = confirm_token_hash(self.store, operation_id)
            return stored is not None and bool(stored) and hmac.compare_digest(stored, _hash(token or ""))

        return self._confirm(operation_id, control, admin=admin, proof=token_matches,
                             wrong=f"wrong confirmation token for operation {operation_id}")

    def confirm_counted(self, operation_id: str, digest: str, control: Control) -> Operation:
        """`confirm` without the token: by who the caller is and what it was shown. For a person who
        counted in one browser and confirms in another (the token lives in the first's cookie).

        `digest` must be the operation's `counted_digest` (the page showing the count carries it), so
        the confirmation acts on the set its confirmer saw, never on another; the caller must be its
        creator (never another, an admin included: the count and its refusals were made with the
        creator's rights, and a run with other rights would change what it did not show) and still
        allowed to run commands (`OperatorsPolicy.may_act`, read now). Refused as `confirm` is otherwise.
        """
        who = control.identity.name
        if not control.operators.may_act(who):
            raise NotAuthorized(f"{who!r} may run no command (a read-only role): "
                                f"operation {operation_id} not confirmed")
        creator = self.get(operation_id).operator
        if who != creator:
            raise NotAuthorized(f"operation {operation_id} was counted by {creator!r}: only they may confirm it by "
                                "what was counted (count it again to run it with your own rights)")
        return self._confirm(operation_id, control, admin=False,
                             proof=lambda op: hmac.compare_digest(op.counted_digest, digest or ""),
                             wrong=f"operation {operation_id} counted other jobs than the confirmation names: "
                                   "open it again and confirm what it shows")

    def _confirm(self, operation_id: str, control: Control, *, admin: bool, proof: Callable[[Operation], bool],
                 wrong: str) -> Operation:
        op = self.get(operation_id)
        who = control.identity.name
        if who != op.operator and not admin:
            raise NotAuthorized(f"operation {operation_id} was created by {op.operator!r}: only they or an admin "
                                "may confirm it")
        if op.status != "awaiting_confirmation":
            raise ControlRefused(f"operation {operation_id} is {op.status}, not awaiting confirmation"
                                 + (" (it was confirmed already)" if op.confirmed_at is not None else
                                    "; preview it again" if op.status == "expired" else ""))
        if not proof(op):
            raise ControlRefused(wrong)
        now = self.store.now()
        if not start_operation(self.store, operation_id, at=now, by=who,
                               counts=_counts(op.counts_by_state, {}, op.would_refuse)):
            current = self.get(operation_id)
            raise ControlRefused(f"operation {operation_id} is {current.status}: it can no longer be confirmed"
                                 + ("; preview it again" if current.status == "expired" else ""))
        started = self.get(operation_id)
        self._start(started, control)
        return started

    def cancel(self, operation_id: str, who: str, *, admin: bool = False) -> Operation:
        """Cancel: a preview at once; a run stops before its next job (what it did is kept).

        Only its creator, its confirmer or an admin may cancel (NotAuthorized); an ended one is refused.
        """
        op = self.get(operation_id)
        if who not in (op.operator, op.confirmed_by) and not admin:
            raise NotAuthorized(f"operation {operation_id} was created by {op.operator!r}: only they, its confirmer "
                                "or an admin may cancel it")
        now = self.store.now()
        changed = False
        if op.status == "awaiting_confirmation":
            changed = cancel_preview(self.store, operation_id, was=op.status, by=who, at=now)
        elif op.status == "running":
            changed = request_cancel(self.store, operation_id, by=who)
        if not changed:
            current = self.get(operation_id)
            if current.status == "running":  # cancelled already: say so, do not refuse
                return current
            raise ControlRefused(f"operation {operation_id} is {current.status}: there is nothing to cancel")
        with self._lock:
            wake = self._wakes.get(operation_id)
        if wake is not None:
            wake.set()
        return self.get(operation_id)

    def join(self, operation_id: str, timeout: float | None = None) -> bool:
        """Wait for this process's run of the operation to end; whether it has (True when none runs here)."""
        with self._lock:
            thread = self._threads.get(operation_id)
        if thread is not None:
            thread.join(timeout)
        return not self._alive(operation_id)

    # -- the run ---------------------------------------------------------------------------------

    def _start(self, op: Operation, control: Control) -> None:
        wake = threading.Event()
        thread = threading.Thread(target=self._run, args=(op, control, wake), daemon=True,
                                  name=f"reliable-operation-{op.operation_id}")
        with self._lock:
            self._threads[op.operation_id] = thread
            self._wakes[op.operation_id] = wake
        thread.start()

    def _run(self, op: Operation, control: Control, wake: threading.Event) -> None:
        progress = _Progress(dict(op.counts_by_state), op.would_refuse)
        try:
            self._work(op, control.with_detail(operation_id=op.operation_id), wake, progress)
        except Exception as exc:
            logger.exception("bulk operation %s broke after %d jobs", op.operation_id, progress.done)
            try:
                self._write(op.operation_id, progress, status="failed",
                            error=f"the run broke: {client_message(exc)}")
            except Exception:
                logger.exception("bulk operation %s: recording its failure failed too", op.operation_id)
        finally:
            with self._lock:
                self._threads.pop(op.operation_id, None)
                self._wakes.pop(op.operation_id, None)

    def _work(self, op: Operation, control: Control, wake: threading.Event, progress: _Progress) -> None:
        method = getattr(control, op.command)
        kwargs = dict(op.options)

        def sleep(seconds: float) -> None:
            if self._sleep is not None:
                self._sleep(seconds)
            elif wake.wait(seconds):
                raise _Stop

        limiter = RateLimiter(op.rate or self.bulk_rate, clock=self._clock, sleep=sleep)
        flushed, last_flush = 0, self._clock()
        status = "finished"
        for job_id in op.job_ids:
            if wake.is_set() or self._cancel_requested(op.operation_id):
                status = "cancelled"
                break
            try:
                limiter.acquire()
            except _Stop:
                status = "cancelled"
                break
            progress.add(self._one(method, job_id, op.reason, kwargs))
            if progress.done - flushed >= self.flush_every or self._clock() - last_flush >= self.flush_interval:
                if not self._write(op.operation_id, progress):
                    logger.warning("bulk operation %s is no longer running here (marked %s); stopping",
                                   op.operation_id, self.get(op.operation_id).status)
                    return
                flushed, last_flush = progress.done, self._clock()
        self._write(op.operation_id, progress, status=status)

    @staticmethod
    def _one(method: Callable[..., CommandResult], job_id: str, reason: str,
             kwargs: Mapping[str, Any]) -> dict[str, Any]:
        try:
            result = method(job_id, reason=reason, **kwargs)
        except ReliableError as exc:  # refused and audited by Control: recorded, the run goes on
            outcome = "error" if isinstance(exc, StoreError) else "refused"
            if outcome == "error":  # its text names the database: the log has it, the record (read by clients) not
                logger.warning("bulk operation: job %s: %s", job_id, exc)
            hint = exc.hint if isinstance(exc, ControlRefused) else None
            message = exc.why if isinstance(exc, ControlRefused) else client_message(exc)
            return {"job_id": job_id, "outcome": outcome, "message": message, "error": type(exc).__name__,
                    **({"hint": hint} if hint else {})}
        entry: dict[str, Any] = {
            "job_id": job_id, "outcome": result.outcome,
            "message": result.message.removesuffix(f"; {result.hint}") if result.hint else result.message,
            "status_before": result.before.status.value if result.before else None,
            "status": result.job.status.value if result.job else None}
        if result.hint:
            entry["hint"] = result.hint
        if result.warnings:
            entry["warnings"] = list(result.warnings)
        return entry

    def _cancel_requested(self, operation_id: str) -> bool:
        return cancel_requested(self.store, operation_id)

    def _write(self, operation_id: str, progress: _Progress, *, status: str | None = None,
               error: str | None = None) -> bool:
        """Record progress (and the final status); False when the row is no longer `running`."""
        now = self.store.now()
        values: dict[str, Any] = {"done": progress.done, "updated_at": now, "results": json.dumps(progress.results),
                                  "counts": _counts(progress.by_state, progress.counts, progress.would_refuse)}
        if status is not None:
            values.update(status=status, finished_at=now, error=error)
        return write_progress(self.store, operation_id, values)
