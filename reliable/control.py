"""Operator commands: pause, stop, cancel, resume, restart, requeue, reconcile, discard.

Every command is a compare-and-set transition in the state store (never only a broker message),
so it works while workers or the queue are overloaded, and it is audited on the job as an event
carrying the operator, the reason and the host. Every command needs a reason (`require_reason`):
without one it raises ReasonRequired before reading or writing anything. Refused commands (not
authorized, not allowed in the job's state, failed validation, lost race) raise and are audited as
`command_refused`.

`Control` takes the identity as data and assumes no terminal, so an authenticated network front
end can build one per request (`control.as_operator(Operator(name, host, "api"))`) unchanged.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import dramatiq

from .access import reader_of
from .bulk import BulkReport, Progress, RateLimiter, run_bulk
from .commands import (
    COMMAND_EVENTS,
    NEEDS_REASON,
    RESOLUTIONS,
    SCHEDULE_COMMANDS,
    CommandResult,
    check_reason_text,
    command_states,
    require_reason,
)
from .compensation import compensate
from .dispatch import declare_queue, dispatch
from .errors import ControlRefused, InvalidReason, JobNotFound, ReliableError, TransitionRefused
from .inputs import escape_controls
from .operators import COMMAND_ORDER, Operator, OperatorsPolicy
from .options import stored_contract
from .states import TRANSITIONS, Event, JobStatus
from .store import Job, StateStore
from .store.selection import DISCARDED, JobFilter, Reader, select_jobs
from .store.writes import FRESH_BUDGET

__all__ = [
    "COMMAND_EVENTS",
    "NEEDS_REASON",
    "RESOLUTIONS",
    "SCHEDULE_COMMANDS",
    "ActionPreview",
    "ActorContract",
    "CommandResult",
    "ContractSource",
    "Control",
    "check_reason_text",
    "command_states",
    "require_reason",
]

#: What to do with a REVIEW job instead of resuming or retrying it.
_REVIEW_HINT = ("a REVIEW job waits for a person: check the downstream system, then `reliable reconcile JOB --as "
                "succeeded|cancelled`, or run it again with `reliable restart --allow-duplicate-side-effects`")

S = JobStatus

_RESUMABLE_FROM = (S.PAUSED, S.STOPPED)
_CONFLICT_RETRIES = 3


class ContractSource(Protocol):
    """What Control needs from `reliable.policy.Policy`: the job contract of an actor."""

    def contract(self, actor: str, queue: str, options: Mapping[str, Any]) -> Any:
        """The contract (compensation, resumable, checkpoint_schema, idempotent, stop_grace...)."""


@dataclass(frozen=True)
class ActorContract:
    """The part of an actor's contract the control plane acts on."""

    resumable: bool = False
    checkpoint_schema: int | None = None
    compensation: str | None = None
    idempotent: bool = True  # as JobContract: a job is idempotent unless its policy or actor says otherwise
    resume_validator: str | None = None
    known: bool = False  # False: no policy and no registered actor told us anything


@dataclass(frozen=True)
class ActionPreview:
    """Whether a command is allowed on a job now (`allowed`), what it would do or why not (`message`)."""

    command: str
    allowed: bool
    message: str
    needs_duplicate_confirmation: bool = False
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {"command": self.command, "allowed": self.allowed, "message": self.message,
                "needs_duplicate_confirmation": self.needs_duplicate_confirmation, "warnings": list(self.warnings)}


_PREVIEW_REASON = "preview of the available actions (dry run)"


@dataclass(frozen=True)
class _Plan:
    event: Event
    outcome: str = "done"
    checkpoint_schema: int | None = None
    dispatch: bool | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


class Control:
    """The operator control plane over a StateStore.

    Parameters:
      store: the state store commands write to.
      policy: a `reliable.policy.Policy` (anything with `.contract(actor, queue, options)`): tells
        whether a job is resumable, its current checkpoint schema and its compensation actor.
      broker: a Dramatiq broker; when given, resumed/restarted/requeued jobs are published at once
        and compensation actors are enqueued, otherwise the workers' sweeper publishes them.
      operators: the authorization policy; None allows every command (see OperatorsPolicy).
      identity: who is acting; defaults to `Operator.resolve()` (RELIABLE_OPERATOR or the OS user).
      actor_options: options per actor name, for actors not registered on `broker`.
      event_detail: added to the detail of every event it records (e.g. the bulk operation's id).

    Every command takes `reason` (why; recorded on the job's events) and raises ReasonRequired
    without one, before it reads or writes anything.
    """

    def __init__(self, store: StateStore, *, policy: ContractSource | None = None,
                 broker: dramatiq.Broker | None = None, operators: OperatorsPolicy | None = None,
                 identity: Operator | None = None,
                 actor_options: Mapping[str, Mapping[str, Any]] | None = None,
                 event_detail: Mapping[str, Any] | None = None) -> None:
        self.store = store
        self.policy = policy
        self.broker = broker
        self.operators = operators or OperatorsPolicy.allow_all()
        self.identity = identity or Operator.resolve()
        self.actor_options = dict(actor_options or {})
        self.event_detail = dict(event_detail or {})

    def as_operator(self, identity: Operator) -> Control:
        """The same control plane acting as `identity` (one per request in a network front end)."""
        return Control(self.store, policy=self.policy, broker=self.broker, operators=self.operators,
                       identity=identity, actor_options=self.actor_options, event_detail=self.event_detail)

    def with_detail(self, **detail: Any) -> Control:
        """The same control plane adding `detail` to every event it records (a bulk operation's id)."""
        return Control(self.store, policy=self.policy, broker=self.broker, operators=self.operators,
                       identity=self.identity, actor_options=self.actor_options,
                       event_detail={**self.event_detail, **detail})

    # -- contract --------------------------------------------------------------------------------

    def options_for(self, job: Job) -> dict[str, Any]:
        """The actor options known for the job: the contract its actor declared (stored with the job at
        registration), then configured ones, then the broker's actor. Never the message's own options:
        a producer may not choose the code a resume runs nor make a job resumable."""
        options: dict[str, Any] = stored_contract(job.message)
        options.update(self.actor_options.get(job.actor, {}))
        if self.broker is not None:
            with contextlib.suppress(Exception):  # ActorNotFound: the CLI's broker registers no actors
                options.update(self.broker.get_actor(job.actor).options)
        return options

    def contract_for(self, job: Job) -> ActorContract:
        """The job's contract from the policy (if any) and the actor options."""
        options = self.options_for(job)
        known = bool({"resumable", "checkpoint_schema", "compensation"} & set(options))
        if self.policy is not None:
            contract = self.policy.contract(job.actor, job.home_queue, options)
            return ActorContract(
                resumable=bool(getattr(contract, "resumable", False)),
                checkpoint_schema=getattr(contract, "checkpoint_schema", None),
                compensation=getattr(contract, "compensation", None) or None,
                idempotent=bool(getattr(contract, "idempotent", False)),
                resume_validator=getattr(contract, "resume_validator", None) or None,
                known=True,
            )
        return ActorContract(
            resumable=bool(options.get("resumable", False)), checkpoint_schema=options.get("checkpoint_schema"),
            compensation=options.get("compensation") or None, idempotent=bool(options.get("idempotent", True)),
            resume_validator=options.get("resume_validator") or None, known=known,
        )

    # -- commands --------------------------------------------------------------------------------

    def pause(self, job_id: str, *, reason: str | None = None, dry_run: bool = False) -> CommandResult:
        """PENDING/RETRY_WAIT -> PAUSED now; RUNNING: ask its worker to pause at the next checkpoint."""
        return self._run("pause", job_id, reason, dry_run, self._plan_pause)

    def stop(self, job_id: str, *, reason: str | None = None, dry_run: bool = False) -> CommandResult:
        """PENDING/RETRY_WAIT/PAUSED -> STOPPED now; RUNNING -> STOPPING (the worker stops after its unit)."""
        return self._run("stop", job_id, reason, dry_run, self._plan_stop)

    def cancel(self, job_id: str, *, reason: str | None = None, dry_run: bool = False) -> CommandResult:
        """Cancel the job; runs its compensation actor when side effects were applied (see docs/control.md)."""
        return self._run("cancel", job_id, reason, dry_run, self._plan_cancel)

    def resume(self, job_id: str, *, reason: str | None = None, dry_run: bool = False) -> CommandResult:
        """PAUSED/STOPPED -> PENDING from the last checkpoint, same job_id; refuses non-resumable jobs."""
        return self._run("resume", job_id, reason, dry_run, self._plan_resume)

    def restart(self, job_id: str, *, reason: str | None = None, dry_run: bool = False,
                allow_duplicate_side_effects: bool = False) -> CommandResult:
        """FAILED/DEAD/REVIEW/STOPPED/CANCELLED -> PENDING from the beginning (checkpoint cleared).

        A job whose contract is not idempotent and that has run at least once is refused unless
        `allow_duplicate_side_effects`, as for `requeue`.
        """
        return self._run("restart", job_id, reason, dry_run,
                         functools.partial(self._plan_restart, allow_duplicates=allow_duplicate_side_effects))

    def requeue(self, job_id: str, *, reason: str | None = None, dry_run: bool = False,
                allow_duplicate_side_effects: bool = False) -> CommandResult:
        """FAILED/DEAD -> PENDING from the last checkpoint, with a fresh retry budget (`reliable retry`).

        A job whose contract is not idempotent is refused unless `allow_duplicate_side_effects`: its
        side effect may already have happened, and running it again may repeat it.
        """
        return self._run("requeue", job_id, reason, dry_run,
                         functools.partial(self._plan_requeue, allow_duplicates=allow_duplicate_side_effects))

    def reconcile(self, job_id: str, *, resolution: str, reason: str | None = None,
                  dry_run: bool = False) -> CommandResult:
        """Resolve a REVIEW job as `succeeded` or `cancelled` after a person checked its side effects."""
        if resolution not in RESOLUTIONS:
            raise ControlRefused(f"reconcile: resolution must be 'succeeded' or 'cancelled', not {resolution!r}")

        def plan(job: Job, reason: str | None) -> _Plan:
            event = Event.RECONCILE_SUCCEEDED if resolution == "succeeded" else Event.RECONCILE_CANCELLED
            self._require_state(job, event, "reconcile", hint="only REVIEW jobs are reconciled")
            return _Plan(event, detail={"resolution": resolution})

        return self._run("reconcile", job_id, reason, dry_run, plan)

    def discard(self, job_id: str, *, reason: str | None = None, dry_run: bool = False) -> CommandResult:
        """Take a DEAD job out of the dead-letter listing (an audited `discarded` event; it stays DEAD)."""
        require_reason("discard", reason)
        self._check_reason("discard", job_id, reason, dry_run)
        identity = self.identity
        job = self.store.get(job_id)
        try:
            self._precheck("discard", job, reason)
            if job.status is not S.DEAD:
                raise ControlRefused(f"job {job_id}: discard needs a DEAD job, it is {job.status.value}")
        except ControlRefused as exc:
            return self._refused("discard", job, reason, exc, dry_run)
        if dry_run:
            return CommandResult("discard", job_id, "dry_run", "would discard (stays DEAD, leaves the DLQ)",
                                 before=job, job=job, event=DISCARDED)
        self.store.record_event(job_id, DISCARDED, operator=identity.name, reason=reason, host=identity.host,
                                detail={**self.event_detail, "command": "discard", "source": identity.source})
        return CommandResult("discard", job_id, "done", "discarded: removed from the dead-letter queue",
                             before=job, job=self.store.get(job_id), event=DISCARDED)

    # -- what a job offers -----------------------------------------------------------------------

    def available(self, job_id: str) -> list[ActionPreview]:
        """Every command as a dry run on this job: what a console offers, and why not where it does not.

        Nothing is written. A retry or restart refused only because the actor is not idempotent is
        offered with `needs_duplicate_confirmation` (the person must confirm that the side effect may
        repeat); a REVIEW job offers both reconcile resolutions.
        """
        previews: list[ActionPreview] = []
        for command in COMMAND_ORDER:
            kwargs: dict[str, Any] = {"resolution": "succeeded"} if command == "reconcile" else {}
            result: CommandResult = getattr(self, command)(job_id, reason=_PREVIEW_REASON, dry_run=True, **kwargs)
            confirm = False
            if not result.ok and command in ("restart", "requeue"):
                again: CommandResult = getattr(self, command)(job_id, reason=_PREVIEW_REASON, dry_run=True,
                                                              allow_duplicate_side_effects=True)
                if again.ok:
                    result, confirm = again, True
            previews.append(ActionPreview(command, result.ok, result.message, confirm, result.warnings))
        return previews

    # -- bulk ------------------------------------------------------------------------------------

    @property
    def reader(self) -> Reader:
        """Who its selections are for: its identity under its operators policy (`access.reader_of`), the
        one rule every selection of this Control (`select`, bulk previews) follows; with the default
        policy (allow all: a caller holding the store) it may search and act on every job."""
        return reader_of(self.operators, self.identity.name)

    def select(self, filters: JobFilter, *, limit: int | None = 100) -> list[Job]:
        """The jobs `filters` matches for `reader`, oldest change first, at most `limit`; NotAuthorized
        when it searches arguments without the right to (`Reader.check`)."""
        return select_jobs(self.store, filters, reader=self.reader, limit=limit)

    def run_bulk(self, command: str, jobs: list[Job], *, reason: str | None = None, limit: int = 100,
                 dry_run: bool = False, rate: float | None = None, progress: Progress | None = None,
                 clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None,
                 **kwargs: Any) -> BulkReport:
        """Apply `command` to each job (at most `limit`), `rate` per second, reporting each result.

        Refusals do not stop the run; they are in the report. Without a reason it raises
        ReasonRequired before acting on any job.
        """
        require_reason(command, reason)
        method = getattr(self, command, None)
        if method is None or command.startswith("_") or command in ("select", "run_bulk"):
            raise ControlRefused(f"unknown command {command!r}")
        limiter = RateLimiter(rate, clock=clock, sleep=sleep) if rate else None

        def one(job: Job) -> CommandResult:
            try:
                result: CommandResult = method(job.job_id, reason=reason, dry_run=dry_run, **kwargs)
            except ReliableError as exc:
                return CommandResult(command, job.job_id, "refused", str(exc), before=job)
            return result

        return run_bulk(jobs[:limit], one, limiter=None if dry_run else limiter, progress=progress,
                        skipped=max(0, len(jobs) - limit))

    # -- planning --------------------------------------------------------------------------------

    def _plan_pause(self, job: Job, reason: str | None) -> _Plan:
        if job.status is S.RUNNING:
            return _Plan(Event.PAUSE_REQUEST, outcome="requested")
        self._require_state(job, Event.PAUSE, "pause")
        return _Plan(Event.PAUSE)

    def _plan_stop(self, job: Job, reason: str | None) -> _Plan:
        if job.status is S.RUNNING:
            return _Plan(Event.STOP_REQUEST, outcome="requested")
        self._require_state(job, Event.STOP, "stop")
        return _Plan(Event.STOP)

    def _plan_cancel(self, job: Job, reason: str | None) -> _Plan:
        contract = self.contract_for(job)
        effects = self.store.effects(job.job_id)
        detail: dict[str, Any] = {"effects": len(effects), "compensation": contract.compensation}
        warnings: tuple[str, ...] = ()
        if effects and not contract.compensation:
            detail["partial_effects_remain"] = True
            warnings = (f"{len(effects)} side effect(s) were already applied and the actor declares no "
                        "compensation: partial side effects remain (nothing is rolled back)",)
        if job.status in (S.RUNNING, S.STOPPING):
            return _Plan(Event.CANCEL_REQUEST, outcome="requested", detail=detail, warnings=warnings)
        self._require_state(job, Event.CANCEL, "cancel")
        return _Plan(Event.CANCEL, detail=detail, warnings=warnings)

    def _plan_resume(self, job: Job, reason: str | None) -> _Plan:
        self._require_state(job, Event.RESUME, "resume",
                            hint=_REVIEW_HINT if job.status is S.REVIEW else
                            "only PAUSED or STOPPED jobs resume; use `reliable restart` or `reliable retry`")
        contract = self.contract_for(job)
        if job.attempt == 0 and job.checkpoint is None:
            # Paused or stopped while PENDING: it never ran, so there is nothing to resume from and
            # nothing that could repeat; it simply becomes PENDING again, whatever its contract.
            return _Plan(Event.RESUME, dispatch=self.broker is not None, detail={"never_ran": True})
        if not contract.resumable:
            raise ControlRefused(
                f"job {job.job_id}: actor {job.actor!r} is not resumable"
                + ("" if contract.known else " (no policy or actor options declare it; pass --policies)")
                + f"; use `reliable restart {job.job_id}` to run it again from the beginning"
            )
        self._check_schema(job, contract)
        self._run_validator(job, contract)
        return _Plan(Event.RESUME, dispatch=self.broker is not None,
                     detail={"from_checkpoint": job.checkpoint_version})

    def _plan_restart(self, job: Job, reason: str | None, *, allow_duplicates: bool) -> _Plan:
        self._require_state(job, Event.RESTART, "restart")
        contract = self.contract_for(job)
        detail: dict[str, Any] = {"cleared_checkpoint_version": job.checkpoint_version}
        # A job that never ran (stopped or cancelled while PENDING) has no side effect to repeat.
        warnings = self._duplicate_guard(job, contract, allow_duplicates, detail) if job.attempt > 0 else ()
        effects = self.store.effects(job.job_id)
        if effects:
            warnings += (f"{len(effects)} side effect(s) were already applied; the job runs again from the "
                         "beginning (units recorded with operation keys are detected as replays)",)
        return _Plan(Event.RESTART, dispatch=self.broker is not None, warnings=warnings,
                     checkpoint_schema=contract.checkpoint_schema, detail=detail)

    def _plan_requeue(self, job: Job, reason: str | None, *, allow_duplicates: bool) -> _Plan:
        self._require_state(job, Event.REQUEUE, "requeue",
                            hint=_REVIEW_HINT if job.status is S.REVIEW else
                            "retry takes FAILED or DEAD jobs; use `reliable resume` or `reliable restart`")
        contract = self.contract_for(job)
        # Unlike resume, a retry without any contract information trusts the worker's own check.
        if job.checkpoint is not None and (contract.known or contract.checkpoint_schema is not None):
            self._check_schema(job, contract, alternative="restart")
        detail: dict[str, Any] = {"from_checkpoint": job.checkpoint_version}
        warnings = self._duplicate_guard(job, contract, allow_duplicates, detail)
        return _Plan(Event.REQUEUE, dispatch=self.broker is not None, detail=detail, warnings=warnings)

    def rerun_guard(self, job: Job, *, allow_duplicates: bool) -> tuple[str, ...]:
        """Running `job`'s work again (a workflow re-running its node as a new job) is refused as a
        restart of it would be: ControlRefused for a non-idempotent job that ran, unless
        `allow_duplicates`; the warnings when allowed."""
        if job.attempt == 0:
            return ()
        return self._duplicate_guard(job, self.contract_for(job), allow_duplicates, {})

    @staticmethod
    def _duplicate_guard(job: Job, contract: ActorContract, allow: bool, detail: dict[str, Any]) -> tuple[str, ...]:
        """Running a non-idempotent job again (retry, restart) may repeat its side effect: refused
        unless allowed; allowed, it is recorded in `detail` and returned as a warning."""
        if contract.idempotent:
            return ()
        if not allow:
            raise ControlRefused(
                f"job {job.job_id}: actor {job.actor!r} is not idempotent, so its side effect (a charge, an "
                "email...) may already have happened and running it again may repeat it",
                hint="reconcile instead: check the downstream system, and only if the effect did not happen run "
                "it again with --allow-duplicate-side-effects (or take it out of the dead letters: "
                "`reliable dlq discard`)")
        detail["allow_duplicate_side_effects"] = True
        return (f"actor {job.actor!r} is not idempotent: running it again may repeat its side effect "
                "(allowed by --allow-duplicate-side-effects)",)

    def _require_state(self, job: Job, event: Event, command: str, *, hint: str | None = None) -> None:
        if (job.status, event) not in TRANSITIONS:
            allowed = sorted(s.value for (s, e) in TRANSITIONS if e is event)
            raise ControlRefused(f"job {job.job_id}: cannot {command} a {job.status.value} job "
                                 f"(allowed from {', '.join(allowed)})" + (f"; {hint}" if hint else ""))

    def _check_schema(self, job: Job, contract: ActorContract, *, alternative: str = "restart") -> None:
        if job.checkpoint is None or job.checkpoint_schema == contract.checkpoint_schema:
            return
        current = "unknown (pass --policies)" if contract.checkpoint_schema is None else contract.checkpoint_schema
        raise ControlRefused(
            f"job {job.job_id}: its checkpoint has schema {job.checkpoint_schema} but actor {job.actor!r} now "
            f"expects {current}; the checkpoint cannot be resumed, use `reliable {alternative} {job.job_id}`"
        )

    def _run_validator(self, job: Job, contract: ActorContract) -> None:
        name = contract.resume_validator
        if not name:
            return
        module_name, _, func_name = str(name).partition(":")
        try:
            validator = getattr(importlib.import_module(module_name), func_name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise ControlRefused(f"job {job.job_id}: resume validator {name!r} cannot be imported ({exc}); "
                                 "it must be 'module:function' importable here") from None
        try:
            ok = validator(job)
        except Exception as exc:
            raise ControlRefused(f"job {job.job_id}: resume validator {name} refused: {exc}") from None
        if ok is False:
            raise ControlRefused(f"job {job.job_id}: resume validator {name} refused the resume")

    # -- execution -------------------------------------------------------------------------------

    def _precheck(self, command: str, job: Job, reason: str | None) -> None:
        self.operators.check(self.identity.name, command, job.home_queue, job.owner)

    def _check_reason(self, command: str, job_id: str, reason: str | None, dry_run: bool) -> None:
        """InvalidReason for a reason with control characters; audited as `command_refused` (the
        reason escaped) when the job exists, as any refusal is."""
        try:
            check_reason_text(command, reason)
        except InvalidReason as exc:
            job = None if dry_run else self.store.find(job_id)
            if job is not None:
                self._refused(command, job, reason, exc, dry_run=False)  # records it, then raises
            raise

    def _run(self, command: str, job_id: str, reason: str | None, dry_run: bool,
             planner: Callable[[Job, str | None], _Plan]) -> CommandResult:
        require_reason(command, reason)
        self._check_reason(command, job_id, reason, dry_run)
        for _ in range(_CONFLICT_RETRIES):
            job = self.store.get(job_id)
            try:
                self._precheck(command, job, reason)
                plan = planner(job, reason)
            except ControlRefused as exc:
                return self._refused(command, job, reason, exc, dry_run)
            if dry_run:
                return CommandResult(command, job_id, "dry_run", _describe(plan, job, dry_run=True),
                                     before=job, job=job, event=plan.event.value, warnings=plan.warnings)
            try:
                return self._apply(command, job, plan, reason)
            except TransitionRefused as exc:
                current = self.store.find(job_id)
                if current is not None and current.version != job.version:
                    continue  # the job moved under us (claimed, finished...): decide again on what it is now
                if current is None:
                    raise JobNotFound(job_id) from None
                return self._refused(command, current, reason, exc, dry_run=False)
        return self._refused(command, self.store.get(job_id), reason,
                             ControlRefused(f"job {job_id}: kept changing; try again"), dry_run=False)

    def _apply(self, command: str, job: Job, plan: _Plan, reason: str | None) -> CommandResult:
        identity = self.identity
        detail = {**self.event_detail, "command": command, "host": identity.host, "source": identity.source,
                  **plan.detail}
        new = self.store.transition(job.job_id, plan.event, expected_version=job.version,
                                    checkpoint_schema=plan.checkpoint_schema, operator=identity.name,
                                    reason=reason, detail=detail, dispatch=plan.dispatch, host=identity.host,
                                    queue=_queue_after(job, plan.event))
        warnings = list(plan.warnings)
        dispatched = False
        if plan.dispatch and self.broker is not None:
            try:
                declare_queue(self.broker, new.queue)
                dispatch(self.broker, new)
                dispatched = True
            except Exception as exc:  # the store is the truth: the sweeper re-publishes it
                warnings.append(f"publishing the message failed ({exc}); the workers' sweeper will re-dispatch it")
        compensation = None
        if plan.event is Event.CANCEL and plan.detail.get("effects") and plan.detail.get("compensation"):
            compensation = str(plan.detail["compensation"])
            warnings.extend(self._compensate(new, compensation, reason))
        if new.workflow_id and (new.message.get("options") or {}).get("workflow_node"):
            warnings.extend(self._advance_workflow(new.workflow_id))
        if plan.detail.get("partial_effects_remain"):
            self.store.record_event(job.job_id, "partial_effects_remain", operator=identity.name, reason=reason,
                                    host=identity.host, detail={**self.event_detail, "effects": plan.detail["effects"]})
        return CommandResult(command, job.job_id, plan.outcome, _describe(plan, new, dry_run=False), before=job,
                             job=new, event=plan.event.value, dispatched=dispatched, compensation=compensation,
                             warnings=tuple(warnings))

    def _advance_workflow(self, workflow_id: str) -> list[str]:
        """A node's job changed state by an operator: let its workflow start or settle what that
        allows (a reconciled REVIEW node's children, a cancelled node's status)."""
        from .workflows.engine import WorkflowEngine

        try:
            WorkflowEngine(self.store, self.broker).advance(workflow_id)
        except ReliableError as exc:  # the recovery loop's sweep advances running workflows later
            return [f"workflow {workflow_id} could not be advanced ({exc})"]
        return []

    def _compensate(self, job: Job, actor: str, reason: str | None) -> list[str]:
        identity = self.identity
        warning = compensate(self.store, self.broker, job, actor, operator=identity.name, reason=reason,
                             host=identity.host)
        return [warning] if warning else []

    def _refused(self, command: str, job: Job, reason: str | None, exc: ReliableError,
                 dry_run: bool) -> CommandResult:
        if not dry_run:
            identity = self.identity
            self.store.record_event(job.job_id, "command_refused", operator=identity.name,
                                    reason=None if reason is None else escape_controls(reason),
                                    host=identity.host,
                                    detail={**self.event_detail, "command": command, "why": str(exc),
                                            "source": identity.source})
            raise exc
        return CommandResult(command, job.job_id, "refused", str(exc), before=job, job=job,
                             hint=getattr(exc, "hint", None))


def _describe(plan: _Plan, job: Job, *, dry_run: bool) -> str:
    target = TRANSITIONS.get((job.status, plan.event)) if dry_run else job.status
    verb = "would move" if dry_run else "moved"
    if plan.outcome == "requested":
        what = {Event.PAUSE_REQUEST: "pause", Event.STOP_REQUEST: "stop", Event.CANCEL_REQUEST: "cancel"}
        text = (f"{'would ask' if dry_run else 'asked'} the worker to {what.get(plan.event, plan.event.value)} "
                "at its next checkpoint or heartbeat")
    else:
        text = f"{verb} to {target.value if target else '?'}"
    if plan.dispatch is False and not dry_run:
        text += " (not published here: no --broker; a worker's recovery loop publishes it at its next pass)"
    return text


def _queue_after(job: Job, event: Event) -> str | None:
    """The queue a command moves the job to: a restart or requeue (a fresh retry budget) sends a
    routed job back to its own queue; resume and the others leave it where it waits (None)."""
    return job.home_queue if event in FRESH_BUDGET and job.queue != job.home_queue else None
