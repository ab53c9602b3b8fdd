"""Running workflows: submission, advancing after a node's outcome, and operators' commands.

Everything that changes a workflow happens in one transaction holding its lock
(`WorkflowStore.locked`): the nodes' job states are read there, the pure planner decides
(reliable.workflows.planning), the jobs of nodes that became ready are registered PENDING there,
and the workflow's status and events are written there. Messages are published after the commit;
one lost on the way is published again by the sweeper of PENDING jobs, like any job's.

Who advances a workflow: the worker that committed a node's outcome (right after the commit), the
recovery loop (a sweep of running or stopping workflows not looked at for `sweep_after` seconds: the
worker may have died between its commit and the advance), every workflow command, and every job
command (`Control`) on a node's job.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import dramatiq

from ..commands import CommandResult, JobCommands, command_states, require_reason
from ..dispatch import declare_queue
from ..errors import ConfigError, ControlRefused, ReliableError
from ..options import CODE_VERSION
from ..registrar import Registrar, find_installed
from ..states import FAILED_FOR_GOOD, JobStatus
from ..store import NewJob, NodeResult, StateStore
from ..store.workflows import LockedWorkflow, NodeRow, WorkflowStore
from .graph import WorkflowDefinitionError, input_digest
from .planning import (
    ResumePlan,
    Snapshot,
    WorkflowStatus,
    node_states,
    ready_nodes,
    restart_plan,
    resume_plan,
    workflow_status,
)

if TYPE_CHECKING:
    from .definition import Node, Workflow

__all__ = [
    "RESULT_LIMIT",
    "WORKFLOW_COMMANDS",
    "WorkflowCommand",
    "WorkflowEngine",
    "command_refusal",
    "find_middleware",
    "node_result",
    "submit",
]

logger = logging.getLogger("reliable.workflows")

#: The largest result (JSON bytes) a node keeps in the store for its children; a larger one is not
#: kept (a child that needs it is BLOCKED, saying so): use Dramatiq's Results for big values.
RESULT_LIMIT = 64 * 1024

#: The workflow commands, in the order a console lists them (WorkflowEngine's methods).
WORKFLOW_COMMANDS: tuple[str, ...] = ("pause", "stop", "cancel", "resume", "restart")


def command_refusal(command: str, snapshot: Snapshot) -> str | None:
    """Why `command` would be refused on the workflow as `snapshot` stands, or None: the engine's
    own guards (a hold's `_hold_refusal`, the resume and restart plans' refusals), read without
    acting, so a console offers only what the engine would do. The command itself decides again
    (the nodes' jobs may have moved; resume also weighs changed inputs and each job's dry run)."""
    if command == "resume":
        return resume_plan(snapshot).refusal
    if command == "restart":
        return restart_plan(snapshot).refusal
    if command not in WORKFLOW_COMMANDS:
        raise ConfigError(f"unknown workflow command {command!r} (known: {', '.join(WORKFLOW_COMMANDS)})")
    return _hold_refusal(command, snapshot)


def find_middleware(broker: dramatiq.Broker) -> Registrar:
    """The ReliableMiddleware installed on `broker` (workflows need its store and its registration)."""
    installed = find_installed(broker)
    if installed is not None:
        return installed
    raise ReliableError("reliable is not installed on this broker: call reliable.install(broker, store=...) first")


def submit(workflow: Workflow, *, broker: dramatiq.Broker | None = None, workflow_id: str | None = None,
           operator: str | None = None) -> str:
    """Persist `workflow` in one transaction (nodes, edges, inputs, digests, root jobs), publish its
    roots' messages, and return its id."""
    broker = broker or dramatiq.get_broker()
    middleware = find_middleware(broker)
    workflow_id = workflow_id or uuid.uuid4().hex
    if WorkflowStore(middleware.store).find(workflow_id) is not None:
        raise WorkflowDefinitionError(f"workflow {workflow.name!r}: a workflow with id {workflow_id!r} exists already")
    rows: list[dict[str, Any]] = []
    roots: list[NewJob] = []
    owners: set[str] = set()
    for position, each in enumerate(workflow.nodes):
        new_job, digest, message, code_version = _prepared_node(middleware, broker, workflow_id, each)
        if new_job.owner:
            owners.add(new_job.owner)
        root = not each.after
        rows.append({"node": each.name, "position": position, "actor": each.actor, "queue": new_job.queue,
                     "message": json.dumps(message), "owner": new_job.owner,
                     "checkpoint_schema": new_job.checkpoint_schema, "code_version": code_version, "digest": digest,
                     "trigger": each.trigger, "on_upstream_failure": each.on_upstream_failure,
                     "pass_results": each.pass_results, "job_id": new_job.job_id if root else None})
        if root:
            roots.append(new_job)
    store = middleware.store
    WorkflowStore(store).create(
        {"workflow_id": workflow_id, "name": workflow.name, "status": WorkflowStatus.RUNNING,
         "owner": owners.pop() if len(owners) == 1 else None, "created_by": operator},
        rows, workflow.edges, roots, detail={"nodes": len(workflow.nodes), "edges": len(workflow.edges)})
    logger.info("workflow %s (%s) submitted: %d nodes, %d roots", workflow_id, workflow.name, len(rows), len(roots))
    _publish(broker, roots, workflow_id)
    return workflow_id


def _prepared_node(middleware: Registrar, broker: dramatiq.Broker, workflow_id: str,
                   each: Node) -> tuple[NewJob, str, dict[str, Any], str | None]:
    """A node's job as the middleware registers any message (contract, owner, links), its input
    digest, the message stored to register it later, and the actor's declared code version."""
    actor = middleware.registration.tracked_actor(broker, each.actor, who=f"workflow {workflow_id}, node {each.name!r}",
                                                  error=WorkflowDefinitionError)
    declared = actor.options.get(CODE_VERSION)
    code_version = None if declared is None else str(declared)
    message: dramatiq.Message[Any] = dramatiq.Message(
        queue_name=each.queue, actor_name=each.actor, args=tuple(each.args), kwargs=dict(each.kwargs),
        options={**each.options, "workflow_id": workflow_id, "workflow_node": each.name},
        message_id=uuid.uuid4().hex, message_timestamp=int(time.time() * 1000))
    prepared = middleware.registration.new_job(broker, message, None)
    if prepared is None:
        raise WorkflowDefinitionError(f"node {each.name!r}: actor {each.actor!r} is not tracked by reliable")
    new_job = prepared[0]
    return new_job, input_digest(each, code_version), dict(new_job.message), code_version


def node_result(job_id: str, value: Any) -> NodeResult:
    """A node's return value as stored for its children: JSON up to RESULT_LIMIT bytes, or a note."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as exc:
        return NodeResult(job_id, None, f"the result is not JSON ({type(value).__name__}: {exc})")
    if len(text.encode()) > RESULT_LIMIT:
        return NodeResult(job_id, None, f"the result is {len(text.encode())} bytes, over the {RESULT_LIMIT}-byte "
                                        "limit for results kept in the store (use Dramatiq's Results)")
    return NodeResult(job_id, text)


def _each(control: JobCommands, command: str, job_id: str, reason: str | None, *, dry_run: bool = False
          ) -> CommandResult:
    """One job command of a workflow command: a refusal (audited on the job by Control) is a result."""
    try:
        result: CommandResult = getattr(control, command)(job_id, reason=reason, dry_run=dry_run)
    except ControlRefused as exc:
        return CommandResult(command, job_id, "refused", str(exc))
    return result


def _publish(broker: dramatiq.Broker | None, new_jobs: Iterable[NewJob], workflow_id: str) -> None:
    if broker is None:
        return
    for job in new_jobs:
        data = dict(job.message)
        try:
            declare_queue(broker, job.queue)
            broker.enqueue(dramatiq.Message(**{**data, "options": dict(data.get("options") or {})}))
        except Exception:  # registered: the sweeper of PENDING jobs publishes it
            logger.warning("workflow %s: publishing job %s failed; the recovery loop will", workflow_id,
                           job.job_id, exc_info=True)


@dataclass(frozen=True)
class WorkflowCommand:
    """What a workflow command did: its outcome, the workflow's status after it, the plan (resume,
    restart) and each job command it sent."""

    command: str
    workflow_id: str
    outcome: str  # done | dry_run | refused
    message: str
    status: str | None = None
    plan: ResumePlan | None = None
    jobs: tuple[CommandResult, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the command was (or, in a dry run, would be) carried out."""
        return self.outcome != "refused"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {"command": self.command, "workflow_id": self.workflow_id, "outcome": self.outcome,
                "message": self.message, "status": self.status,
                "plan": None if self.plan is None else self.plan.as_dict(),
                "jobs": [job.as_dict() for job in self.jobs]}


class WorkflowEngine:
    """Advances workflows and runs operators' commands on them.

    `broker`: publishes the jobs that start (None: the sweeper of PENDING jobs publishes them).
    `middleware`: needed only to recompute nodes from a new definition (resume with changed inputs).
    `on_transition(workflow_id, from_status, to_status)`: called after the commit of each status
    change (the worker's metrics count them).
    """

    def __init__(self, store: StateStore, broker: dramatiq.Broker | None = None, *,
                 middleware: Registrar | None = None,
                 on_transition: Callable[[str, str, str], None] | None = None) -> None:
        self.store = store
        self.broker = broker
        self.middleware = middleware
        self.on_transition = on_transition
        self.rows = WorkflowStore(store)

    @contextmanager
    def _locked(self, workflow_id: str) -> Iterator[LockedWorkflow]:
        """The workflow locked for one transaction; its status changes told after the commit."""
        with self.rows.locked(workflow_id) as locked:
            yield locked
        if any(after == WorkflowStatus.SUCCEEDED for _, after in locked.transitions) and locked.run > 1:
            self._resolve_superseded(workflow_id)
        for before, after in locked.transitions:
            if self.on_transition is not None:
                try:
                    self.on_transition(workflow_id, before, after)
                except Exception:  # an observer never breaks a workflow
                    logger.exception("workflow %s: transition listener failed", workflow_id)

    def _resolve_superseded(self, workflow_id: str) -> int:
        """After a workflow succeeded in a later run (a resume or restart), take its earlier node
        jobs that died out of the dead letters: a `discarded` event on each says which workflow run
        superseded it. They stay DEAD (their history is the workflow's). How many were resolved."""
        from ..store.selection import DISCARDED, JobFilter, Reader, select_jobs

        current = {row["job_id"] for row in self.rows.nodes(workflow_id) if row["job_id"]}
        head = self.rows.get(workflow_id)
        dead = select_jobs(self.store, JobFilter(statuses=(JobStatus.DEAD,), workflow_id=(workflow_id,),
                                                 exclude_discarded=True),
                           reader=Reader.trusted("workflows"), limit=None)
        resolved = 0
        for job in dead:
            if job.job_id in current:
                continue
            try:
                self.store.record_event(
                    job.job_id, DISCARDED, operator="reliable",
                    reason=f"superseded: workflow {workflow_id} succeeded in run {head['run']} after a "
                           "resume or restart; a later job of this node replaced this one",
                    detail={"command": "superseded", "source": "workflow", "workflow_id": workflow_id,
                            "run": head["run"]})
                resolved += 1
            except ReliableError:  # one job must not stop the others; the sweep is idempotent
                logger.exception("workflow %s: resolving superseded dead job %s failed", workflow_id, job.job_id)
        if resolved:
            logger.info("workflow %s: %d superseded dead node job(s) left the dead letters", workflow_id, resolved)
        return resolved

    # -- advancing -------------------------------------------------------------------------------

    def advance(self, workflow_id: str) -> str:
        """Start the nodes whose parents allow it and settle the workflow's status; the status."""
        with self._locked(workflow_id) as locked:
            started = self._start_ready(locked)
            status = self._settle(locked, locked.hold)
        _publish(self.broker, started, workflow_id)
        return status

    def advance_stale(self, *, older_than: float, limit: int = 50) -> int:
        """Advance the running (or stopping) workflows nobody looked at for `older_than` seconds;
        how many were."""
        cutoff = self.store.now() - older_than
        done = 0
        for workflow_id in self.rows.unsettled(checked_before=cutoff, limit=limit):
            try:
                self.advance(workflow_id)
                done += 1
            except Exception:  # one workflow must not stop the recovery pass for the others
                logger.exception("workflow %s: advance failed", workflow_id)
        return done

    def _start_ready(self, locked: LockedWorkflow) -> list[NewJob]:
        """Register the jobs of the nodes that became ready. A node's job id is chosen here, under
        the lock, when its job is registered: nobody can know it before, so no message can claim
        to be a node that has not started."""
        ready = ready_nodes(locked.snapshot)
        if not ready:
            return []
        rows = locked.node_rows()
        new_jobs = []
        for name in ready:
            job_id = uuid.uuid4().hex
            locked.assign(name, job_id)
            new_jobs.append(self._job_for(locked.snapshot, rows, name, job_id))
        locked.register(new_jobs)
        locked.reload()
        logger.info("workflow %s: started %s", locked.workflow_id, ", ".join(ready))
        return new_jobs

    @staticmethod
    def _job_for(snapshot: Snapshot, rows: Mapping[str, NodeRow], name: str, job_id: str) -> NewJob:
        view = snapshot.node(name)
        row = rows[name]
        data = dict(row.message)
        data["message_id"] = job_id
        data["message_timestamp"] = int(time.time() * 1000)
        if view.pass_results:
            results = [None if (text := rows[parent].result) is None else json.loads(text)
                       for parent in view.parents]
            data["args"] = [*list(data.get("args") or ()), *results]
        return NewJob(job_id=job_id, queue=row.queue, actor=row.actor, message=data, owner=row.owner,
                      workflow_id=snapshot.workflow_id, trace_id=(data.get("options") or {}).get("trace_id"),
                      checkpoint_schema=row.checkpoint_schema)

    @staticmethod
    def _settle(locked: LockedWorkflow, hold: str | None) -> str:
        """Derive the workflow's status under `hold` and store both (an event when the status changed)."""
        snapshot = Snapshot(locked.workflow_id, locked.snapshot.nodes, hold=hold, status=locked.status,
                            run=locked.run)
        states = node_states(snapshot)
        status = workflow_status(snapshot, states)
        before = locked.status
        if status != before:
            failed = sorted(name for name, state in states.items() if state in FAILED_FOR_GOOD)
            locked.event(f"workflow_{status.lower()}", from_status=before, to_status=status,
                         detail={"failed_nodes": failed} if failed else None)
            locked.transitions.append((before, status))
            logger.info("workflow %s: %s -> %s", locked.workflow_id, before, status)
        locked.save(status=status, hold=hold)
        return status

    # -- commands --------------------------------------------------------------------------------

    def hold(self, command: str, workflow_id: str, control: JobCommands, *, reason: str | None,
             dry_run: bool = False) -> WorkflowCommand:
        """pause / stop / cancel a workflow: no node starts while the hold stands, and each node job
        gets the same command (audited on the job by Control); the workflow records who and why.

        The hold is written, and the jobs to act on are read, in one transaction holding the
        workflow's lock: a node cannot start between the two. A cancel is never weakened into a
        pause or a stop."""
        require_reason(command, reason)
        refusal = self._authorize(command, workflow_id, control, reason, dry_run=dry_run)
        if refusal is not None:
            return refusal
        snapshot = self.rows.snapshot(workflow_id)
        problem = _hold_refusal(command, snapshot)
        if problem is not None:
            return self._refuse(command, workflow_id, control, reason, problem, dry_run=dry_run)
        if dry_run:
            targets = _hold_targets(command, snapshot)
            jobs = tuple(_each(control, name, job_id, reason, dry_run=True) for job_id, name in targets)
            return WorkflowCommand(command, workflow_id, "dry_run",
                                   f"would {command} the workflow: {len(targets)} job(s) get {command}, no node "
                                   "starts" + (" until it is resumed" if command != "cancel" else ""),
                                   status=snapshot.status, jobs=jobs)
        identity = control.identity
        with self._locked(workflow_id) as locked:
            problem = _hold_refusal(command, locked.snapshot, locked.status, locked.hold)
            if problem is None:
                targets = _hold_targets(command, locked.snapshot)
                locked.event(f"workflow_{command}_requested", operator=identity.name, source=identity.source,
                             reason=reason, detail={"jobs": len(targets)})
                self._settle(locked, command)
            else:
                _refused_in(locked, command, control, reason, problem)
        if problem is not None:
            return WorkflowCommand(command, workflow_id, "refused", problem, status=locked.status)
        scoped = control.with_detail(workflow_id=workflow_id)
        results = tuple(_each(scoped, name, job_id, reason) for job_id, name in targets)
        status = self.advance(workflow_id)
        refused = [r for r in results if not r.ok]
        message = f"{command} requested: {len(results) - len(refused)} job(s) acted on"
        if refused:
            message += f", {len(refused)} refused"
        return WorkflowCommand(command, workflow_id, "done", message, status=status, jobs=results)

    def resume(self, workflow_id: str, control: JobCommands, *, reason: str | None, dry_run: bool = False,
               definition: Workflow | None = None, allow_duplicates: bool = False) -> WorkflowCommand:
        """Resume: re-run only the failed and cancelled nodes and their descendants (new jobs),
        resume paused and stopped jobs from their checkpoints, keep every succeeded node; with
        `definition` (the workflow as now declared: same nodes, edges, actors and queues), nodes
        whose inputs or code version changed are recomputed with their descendants.

        A node whose earlier job ran and whose actor is not idempotent is run again only with
        `allow_duplicates` (as `Control.restart` of that job would require)."""
        return self._rerun("resume", workflow_id, control, reason=reason, dry_run=dry_run, definition=definition,
                           allow_duplicates=allow_duplicates)

    def restart(self, workflow_id: str, control: JobCommands, *, reason: str | None, dry_run: bool = False,
                allow_duplicates: bool = False) -> WorkflowCommand:
        """Run every node again as a new job (refused while any node is active or in REVIEW, and for
        non-idempotent nodes that ran, unless `allow_duplicates`)."""
        return self._rerun("restart", workflow_id, control, reason=reason, dry_run=dry_run, definition=None,
                           allow_duplicates=allow_duplicates)

    def _rerun(self, command: str, workflow_id: str, control: JobCommands, *, reason: str | None, dry_run: bool,
               definition: Workflow | None, allow_duplicates: bool) -> WorkflowCommand:
        require_reason(command, reason)
        refusal = self._authorize(command, workflow_id, control, reason, dry_run=dry_run)
        if refusal is not None:
            return refusal
        try:
            changes = self._changes(workflow_id, definition) if definition is not None else {}
        except WorkflowDefinitionError as exc:
            return self._refuse(command, workflow_id, control, reason, str(exc), dry_run=dry_run)
        digests = {name: digest for name, (digest, _, _) in changes.items()}
        snapshot = self.rows.snapshot(workflow_id)
        resumable = {view.name for view in snapshot.nodes if view.job_id and view.job_status in ("PAUSED", "STOPPED")
                     and control.resume(view.job_id, reason=reason, dry_run=True).ok}
        plan = restart_plan(snapshot) if command == "restart" else resume_plan(snapshot, digests, resumable)
        if plan.refusal is None:
            risky = self._duplicate_risks(snapshot, plan, control, allow_duplicates)
            if risky:
                plan = ResumePlan(refusal=risky, states=plan.states)
        if plan.refusal is not None:
            return self._refuse(command, workflow_id, control, reason, plan.refusal, dry_run=dry_run, plan=plan)
        summary = (f"keep {len(plan.keep)} node(s), resume {len(plan.resume)} job(s), "
                   f"run {len(plan.rerun)} node(s) again")
        if dry_run:
            return WorkflowCommand(command, workflow_id, "dry_run", f"would {command}: {summary}",
                                   status=snapshot.status, plan=plan)
        identity = control.identity
        with self._locked(workflow_id) as locked:
            current = restart_plan(locked.snapshot) if command == "restart" else \
                resume_plan(locked.snapshot, digests, resumable)
            stale = current.as_dict() != plan.as_dict()  # a node moved since the plan was made
            if stale:
                _refused_in(locked, command, control, reason, _STALE_PLAN)
            else:
                locked.save(status=locked.status, hold=None, run=locked.run + 1)
                for name in plan.rerun:
                    change = changes.get(name)
                    locked.assign(name, None, digest=change[0] if change else None,
                                  message=change[1] if change else None, code_version=change[2] if change else None)
                locked.event(f"workflow_{command}", operator=identity.name, source=identity.source, reason=reason,
                             detail=plan.as_dict())
        if stale:
            return WorkflowCommand(command, workflow_id, "refused", _STALE_PLAN, status=locked.status, plan=current)
        scoped = control.with_detail(workflow_id=workflow_id)
        replaced = tuple(_each(scoped, "cancel", view.job_id, reason) for view in snapshot.nodes
                         if view.job_id and view.name in plan.rerun and view.job_status in ("PAUSED", "STOPPED"))
        resumed = tuple(_each(scoped, "resume", view.job_id, reason) for view in snapshot.nodes
                        if view.job_id and view.name in plan.resume)
        status = self.advance(workflow_id)
        return WorkflowCommand(command, workflow_id, "done", f"{command}d: {summary}", status=status, plan=plan,
                               jobs=replaced + resumed)

    def _duplicate_risks(self, snapshot: Snapshot, plan: ResumePlan, control: JobCommands, allow: bool) -> str | None:
        """Why re-running the plan's nodes may repeat a side effect (None: it may not, or it is allowed)."""
        refusals = []
        for view in snapshot.nodes:
            if view.name not in plan.rerun or not view.job_id or view.job_status is None:
                continue
            try:
                control.rerun_guard(self.store.get(view.job_id), allow_duplicates=allow)
            except ControlRefused as exc:
                refusals.append(f"node {view.name!r}: {exc}")
        return "; ".join(refusals) or None

    def _changes(self, workflow_id: str, definition: Workflow) -> dict[str, tuple[str, dict[str, Any], str | None]]:
        """Per node of `definition`: (digest, message to register, code version), checked to have
        the stored workflow's nodes, edges (parents in the same order), actors and queues."""
        if self.middleware is None or self.broker is None:
            raise ReliableError("recomputing changed nodes needs the application's broker: "
                                "WorkflowEngine(store, broker, middleware=reliable.install(...))")
        stored = {row["node"]: row for row in self.rows.nodes(workflow_id)}
        declared = {each.name: each for each in definition.nodes}
        parents: dict[str, list[str]] = {name: [] for name in stored}
        for parent, child in self.rows.edges(workflow_id):
            parents[child].append(parent)
        problems = []
        if set(declared) != set(stored):
            added, removed = sorted(set(declared) - set(stored)), sorted(set(stored) - set(declared))
            problems.append(f"nodes added: {added or 'none'}, removed: {removed or 'none'}")
        for name in sorted(set(declared) & set(stored)):
            each, row = declared[name], stored[name]
            if list(each.after) != parents[name]:
                problems.append(f"node {name!r}: after={list(each.after)}, stored {parents[name]}")
            if (each.actor, each.queue) != (row["actor"], row["queue"]):
                problems.append(f"node {name!r}: actor/queue {each.actor}/{each.queue}, stored "
                                f"{row['actor']}/{row['queue']}")
        if problems:
            raise WorkflowDefinitionError(f"workflow {workflow_id}: the definition differs from the stored one ("
                                          + "; ".join(problems) + "); submit it as a new workflow")
        return {each.name: _prepared_node(self.middleware, self.broker, workflow_id, each)[1:]
                for each in definition.nodes}

    def _authorize(self, command: str, workflow_id: str, control: JobCommands, reason: str | None, *,
                   dry_run: bool) -> WorkflowCommand | None:
        """A refusal unless the operator may run `command` on every node's queue and owner."""
        from ..errors import NotAuthorized

        try:
            for row in self.rows.nodes(workflow_id):
                control.operators.check(control.identity.name, command, row["queue"], row["owner"])
        except NotAuthorized as exc:
            return self._refuse(command, workflow_id, control, reason, str(exc), dry_run=dry_run)
        return None

    def record_refusal(self, command: str, workflow_id: str, control: JobCommands, *, reason: str | None,
                       why: str) -> None:
        """Audit a refusal decided before the engine (a reason the store cannot hold, escaped by the
        caller): `command_refused` on the workflow, as the engine's own refusals are."""
        self._refuse(command, workflow_id, control, reason, why, dry_run=False)

    def _refuse(self, command: str, workflow_id: str, control: JobCommands, reason: str | None, message: str, *,
                dry_run: bool, plan: ResumePlan | None = None) -> WorkflowCommand:
        """A refused command: recorded on the workflow (`command_refused`) unless a dry run."""
        status = self.rows.get(workflow_id)["status"]
        if not dry_run:
            with self.rows.locked(workflow_id) as locked:
                _refused_in(locked, command, control, reason, message)
        return WorkflowCommand(command, workflow_id, "refused", message, status=status, plan=plan)


_STALE_PLAN = "the workflow changed while the plan was made; try again"


def _refused_in(locked: LockedWorkflow, command: str, control: JobCommands, reason: str | None, message: str) -> None:
    """Record a refusal in the transaction holding the workflow's lock."""
    identity = control.identity
    locked.event("command_refused", operator=identity.name, source=identity.source, reason=reason,
                 detail={"command": command, "refusal": message})


def _hold_refusal(command: str, snapshot: Snapshot, status: str | None = None, hold: str | None = None) -> str | None:
    """Why `command` (pause, stop, cancel) cannot hold the workflow now, or None."""
    status = snapshot.status if status is None else status
    hold = snapshot.hold if hold is None else hold
    if status in WorkflowStatus.FINAL:
        return f"the workflow is {status}"
    if hold == "cancel" and command != "cancel":
        return "the workflow is being cancelled: a cancel is not turned into a pause or a stop"
    return None


def _hold_targets(command: str, snapshot: Snapshot) -> list[tuple[str, str]]:
    """(job id, job command) for each node job the workflow command acts on."""
    states = command_states(command)
    return [(view.job_id, command) for view in snapshot.nodes
            if view.job_id and view.job_status is not None and JobStatus(view.job_status) in states]
