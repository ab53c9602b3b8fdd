"""Workflows and schedules as the API and the console show and operate them (issue 28).

Reads go through the store's public API (`WorkflowStore`, `reliable.schedules.storage`'s named
queries); every job value (a node's arguments, result and error; a schedule's declared arguments)
goes through `reliable.disclosure` by the caller's rights on that node's or schedule's queue and
owner. Commands go through `WorkflowEngine` with the caller's `Control` (its operators policy
decides and audits refusals on the workflow), and through `reliable.schedules.storage` after the
same operators check the CLI makes (a refusal is audited on the schedule).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..access import Principal
from ..control import SCHEDULE_COMMANDS, check_reason_text, require_reason
from ..disclosure import (
    SCHEDULE_EVENT_FIELDS,
    SCHEDULE_FIELDS,
    SLOT_FIELDS,
    WORKFLOW_EVENT_FIELDS,
    WORKFLOW_FIELDS,
    WORKFLOW_NODE_FIELDS,
    Audience,
    disclose_record,
)
from ..errors import ConfigError, InvalidReason, ScheduleNotFound
from ..inputs import escape_controls
from ..schedules import storage
from ..store.workflow_views import WorkflowStatus
from ..store.workflows import WorkflowNotFound, WorkflowStore
from ..workflows.engine import WORKFLOW_COMMANDS, WorkflowCommand, WorkflowEngine, command_refusal
from ..workflows.planning import node_states
from .state import WebState

__all__ = ["SCHEDULE_ACTIONS", "WORKFLOW_ACTIONS", "ScheduleOutcome", "schedule_command",
           "schedule_detail", "schedule_list", "workflow_command", "workflow_detail", "workflow_list",
           "workflow_permitted"]

#: The workflow commands of POST /api/v1/workflows/{id}/{command} (WorkflowEngine's).
WORKFLOW_ACTIONS: tuple[str, ...] = WORKFLOW_COMMANDS
#: The schedule commands of POST /api/v1/schedules/{name}/{command}.
SCHEDULE_ACTIONS: tuple[str, ...] = ("pause", "resume", "trigger")


def _audience(principal: Principal, queue: str, owner: str | None, patterns: Sequence[str]) -> Audience:
    return Audience(principal.role, principal.sees_secrets_of(queue, owner), tuple(patterns))


def _workflow_audience(principal: Principal, nodes: Sequence[Mapping[str, Any]], patterns: Sequence[str]) -> Audience:
    """The audience for what concerns the whole workflow (its events): it sees secrets only when it
    sees every node's."""
    sees = all(principal.sees_secrets_of(n["queue"], n["owner"]) for n in nodes)
    return Audience(principal.role, sees, tuple(patterns))


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


# -- workflows ------------------------------------------------------------------------------------


def workflow_list(state: WebState, *, status: Sequence[str] = (), names: Sequence[str] = (),
                  limit: int = 50) -> list[dict[str, Any]]:
    """Workflows, newest first (rows of `WORKFLOW_FIELDS`: ids, statuses, times, node counts)."""
    unknown = [s for s in status if s.upper() not in WorkflowStatus.ALL]
    if unknown:
        raise ConfigError(f"parameter 'status': {unknown[0]!r} is not one of {', '.join(WorkflowStatus.ALL)}")
    rows = WorkflowStore(state.store).listing(status=[s.upper() for s in status], names=names, limit=limit)
    public = Audience("list", False)
    return [disclose_record(row, WORKFLOW_FIELDS, public) for row in rows]


def workflow_detail(state: WebState, given: str, principal: Principal) -> dict[str, Any]:
    """One workflow: its row, its nodes (state, job, disclosed arguments, result and last error), the
    edges, its events and its commands (`commands`: each with `allowed` and, when not, `why`: the
    engine's own guard, `engine.command_refusal`). `given` may be a unique prefix of its id."""
    rows = WorkflowStore(state.store)
    workflow_id = rows.resolve(given, linked=False)
    head = rows.get(workflow_id)
    nodes = rows.nodes(workflow_id)
    snapshot = rows.snapshot(workflow_id)
    states = node_states(snapshot)
    parents = {view.name: list(view.parents) for view in snapshot.nodes}
    patterns = state.config.redact
    shown = []
    for node in nodes:
        audience = _audience(principal, node["queue"], node["owner"], patterns)
        row = {**node, "message": _loads(node["message"]), "result": _loads(node["result"]),
               "state": states[node["node"]], "parents": parents.get(node["node"], [])}
        if not row["job_status"]:
            row["job_id"] = None  # assigned, not registered yet
        shown.append(disclose_record(row, WORKFLOW_NODE_FIELDS, audience))
    everyone = _workflow_audience(principal, nodes, patterns)
    return {"workflow": disclose_record(head, WORKFLOW_FIELDS, everyone),
            "commands": [{"command": command, "allowed": why is None, "why": why}
                         for command in WORKFLOW_ACTIONS for why in [command_refusal(command, snapshot)]],
            "masked": not all(principal.sees_secrets_of(n["queue"], n["owner"]) for n in nodes),
            "nodes": shown, "edges": [list(edge) for edge in rows.edges(workflow_id)],
            "events": [disclose_record(e, WORKFLOW_EVENT_FIELDS, everyone) for e in rows.events(workflow_id)]}


def workflow_command(state: WebState, given: str, command: str, principal: Principal, *, reason: str | None,
                     dry_run: bool = False, allow_duplicates: bool = False) -> WorkflowCommand:
    """Run `command` on the workflow as `principal` (WorkflowEngine: its operators policy checks every
    node's queue and owner; a refusal is recorded on the workflow). The reason is required first."""
    if command not in WORKFLOW_ACTIONS:
        raise ConfigError(f"unknown workflow command {command!r} (known: {', '.join(WORKFLOW_ACTIONS)})")
    if allow_duplicates and command not in ("resume", "restart"):
        raise ConfigError(f"field 'allow_duplicate_side_effects' applies to resume and restart, not {command}")
    require_reason(command, reason)
    control = state.control_for(principal)
    engine = WorkflowEngine(state.store, state.broker)
    try:
        check_reason_text(command, reason)  # a NUL cannot be stored (PostgreSQL): a 400 naming it
    except InvalidReason as exc:
        # Audited on the workflow when there is one, the reason escaped (as Control does for jobs);
        # refused either way.
        if not dry_run:
            with contextlib.suppress(WorkflowNotFound, ConfigError):
                engine.record_refusal(command, WorkflowStore(state.store).resolve(given, linked=False), control,
                                      reason=escape_controls(reason or ""), why=str(exc))
        raise
    workflow_id = WorkflowStore(state.store).resolve(given, linked=False)
    if command in ("pause", "stop", "cancel"):
        return engine.hold(command, workflow_id, control, reason=reason, dry_run=dry_run)
    if command == "resume":
        return engine.resume(workflow_id, control, reason=reason, dry_run=dry_run, allow_duplicates=allow_duplicates)
    return engine.restart(workflow_id, control, reason=reason, dry_run=dry_run, allow_duplicates=allow_duplicates)


def workflow_permitted(state: WebState, workflow_id: str, principal: Principal, command: str) -> bool:
    """Whether `principal` may run `command` on every node of the workflow (its queue and owner)."""
    return all(principal.allows(command, n["queue"], n["owner"])
               for n in WorkflowStore(state.store).nodes(workflow_id))


# -- schedules ------------------------------------------------------------------------------------


def _schedule_row(row: storage.ScheduleRow, principal: Principal, patterns: Sequence[str],
                  slots_fired: int | None = None) -> dict[str, Any]:
    owner = row.template.get("owner")
    data: dict[str, Any] = {"name": row.name, "timing": row.schedule.describe(), "actor": row.actor, "queue": row.queue,
            "owner": owner, "paused": row.paused, "misfire": row.schedule.misfire,
            "next_slot": None if row.paused else row.next_slot, "last_slot": row.last_slot,
            "decided_until": row.decided_until, "definition": row.schedule.definition(),
            "created_at": row.created_at, "updated_at": row.updated_at}
    if slots_fired is not None:
        data["slots_fired"] = slots_fired
    return disclose_record(data, SCHEDULE_FIELDS, _audience(principal, row.queue, owner, patterns))


def schedule_list(state: WebState, principal: Principal) -> list[dict[str, Any]]:
    """Every stored schedule (its declaration disclosed by the caller's rights on its queue), with
    how many slots it fired."""
    rows = storage.list_schedules(state.store)
    fired = storage.count_slots(state.store)
    return [_schedule_row(row, principal, state.config.redact, fired.get(row.name, 0)) for row in rows]


def schedule_detail(state: WebState, name: str, principal: Principal, *, limit: int = 20) -> dict[str, Any]:
    """One schedule: its declaration and state, its recent slots (missed ones are `kind: missed`)
    with their jobs' states, and its audit trail."""
    row = storage.get_schedule(state.store, name)
    audience = _audience(principal, row.queue, row.template.get("owner"), state.config.redact)
    slots = storage.list_slots(state.store, name, limit=limit)
    events = storage.list_events(state.store, name, limit=limit)
    return {"schedule": _schedule_row(row, principal, state.config.redact),
            "slots": [disclose_record({**asdict(s), "status": s.status.value if s.status else None}, SLOT_FIELDS,
                                      audience) for s in slots],
            "events": [disclose_record(asdict(e), SCHEDULE_EVENT_FIELDS, audience) for e in events]}


@dataclass(frozen=True)
class ScheduleOutcome:
    """What a schedule command did: `outcome` done, unchanged (already in that state) or refused."""

    command: str
    schedule: str
    outcome: str
    message: str
    operator: str
    job_id: str | None = None
    published: bool | None = None
    paused: bool | None = None
    next_slot: float | None = None

    @property
    def ok(self) -> bool:
        """Whether the command was carried out (or had nothing to do)."""
        return self.outcome != "refused"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return asdict(self)


def schedule_command(state: WebState, name: str, command: str, principal: Principal, *,
                     reason: str | None) -> ScheduleOutcome:
    """pause, resume or trigger `name` as `principal`: the reason first, then the operators policy on the
    schedule's queue and owner (a refusal is recorded in its audit trail), then the command (audited)."""
    if command not in SCHEDULE_ACTIONS:
        raise ConfigError(f"unknown schedule command {command!r} (known: {', '.join(SCHEDULE_ACTIONS)})")
    require_reason(f"schedules {command}", reason)
    operator = principal.operator(state.config.host).name
    try:
        check_reason_text(f"schedules {command}", reason)
    except InvalidReason as exc:
        # Audited on the schedule when there is one, the reason escaped (as Control does for jobs);
        # refused either way.
        with contextlib.suppress(ScheduleNotFound):
            storage.get_schedule(state.store, name)
            storage.refused(state.store, name, command, operator=operator, reason=escape_controls(reason or ""),
                            why=str(exc))
        raise
    row = storage.get_schedule(state.store, name)
    needed = SCHEDULE_COMMANDS[f"schedules {command}"]
    owner = row.template.get("owner")
    if not principal.allows(needed, row.queue, owner):
        why = (f"{operator!r} may not {command} schedule {name!r}: it needs the {needed} command on queue "
               f"{row.queue!r}" + (f" and owner {owner!r}" if owner else ""))
        storage.refused(state.store, name, command, operator=operator, reason=reason, why=why)
        return ScheduleOutcome(command, name, "refused", why, operator)
    if command == "trigger":
        job = storage.trigger(state.store, name, operator=operator, reason=reason or "")
        published = False
        if state.broker is not None:
            from ..dispatch import dispatch

            try:
                dispatch(state.broker, state.store.get(job.job_id))
                published = True
            except Exception:  # registered PENDING: the workers' sweeper publishes it
                published = False
        return ScheduleOutcome(command, name, "done", f"triggered schedule {name}: job {job.job_id}", operator,
                               job_id=job.job_id, published=published)
    paused = command == "pause"
    changed = storage.set_paused(state.store, name, paused, operator=operator, reason=reason or "")
    after = storage.get_schedule(state.store, name)
    message = (f"{command}d schedule {name}" if changed
               else f"schedule {name} is already {'paused' if paused else 'active'}: nothing changed")
    return ScheduleOutcome(command, name, "done" if changed else "unchanged", message, operator,
                           paused=after.paused, next_slot=None if after.paused else after.next_slot)
