"""What leaves the process of a job's data: one function, `disclose(value, kind, audience)`.

Every surface that shows a job's values to a person or another system (the API, the console,
`reliable` tables and `--json`, the exporter's runbook pages, the alerts' annotations) passes each
value through `disclose` with the value's `Kind` and the reader's `Audience`. The rules, in one place:

- An audience that `sees_secrets` (an admin; an operator on a job inside its scope; a `reliable`
  command run with the store's own credentials) gets every value as stored. Error texts and
  tracebacks were masked once already when they were written (`reliable.redact.redact_secrets`).
- Any other audience (a viewer, an operator outside its scope, the anonymous reader of a runbook
  page or an alert notification) gets:
  - PUBLIC values (ids, states, times, counters, names, an operator's reason) as stored;
  - structured values (ARGUMENTS, CHECKPOINT, EVENT_DETAIL, EFFECT_RESULT) with the value of every
    key naming a secret masked (`is_secret_name`, plus the deployment's glob patterns), and every
    string inside masked as free text (a `password=...` inside a message);
  - free text (ERROR_TEXT, TRACEBACK) with every `name=value` of a secret's name masked.

Which kind each field of a record is: `JOB_FIELDS`, `EVENT_FIELDS`, `ATTEMPT_FIELDS`, `EFFECT_FIELDS`.
`disclose_record` applies them to a record's dict; a key none declares is masked whole for an
audience that does not see secrets (a new column fails closed), and
tests/unit/test_disclosure.py fails until the new field is given its kind.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from .redact import MASK, is_secret_name, redact_secrets

__all__ = [
    "ATTEMPT_FIELDS",
    "EFFECT_FIELDS",
    "EVENT_FIELDS",
    "JOB_FIELDS",
    "SCHEDULE_EVENT_FIELDS",
    "SCHEDULE_FIELDS",
    "SLOT_FIELDS",
    "WORKFLOW_EVENT_FIELDS",
    "WORKFLOW_FIELDS",
    "WORKFLOW_NODE_FIELDS",
    "Audience",
    "Kind",
    "disclose",
    "disclose_json_text",
    "disclose_record",
    "disclosed",
]

_R = TypeVar("_R")


class Kind(enum.Enum):
    """What a value is, for `disclose`: the kinds the rules tell apart."""

    PUBLIC = "public"  # ids, states, times, counters, queue/actor/owner names, an operator's reason
    ARGUMENTS = "arguments"  # a job's message: args, kwargs, options
    CHECKPOINT = "checkpoint"  # what an actor saved to resume from
    ERROR_TEXT = "error_text"  # an exception's message
    TRACEBACK = "traceback"  # a formatted traceback
    EVENT_DETAIL = "event_detail"  # an event's detail object (a policy decision, with the message)
    EFFECT_RESULT = "effect_result"  # what a recorded side effect returned


_STRUCTURED = frozenset({Kind.ARGUMENTS, Kind.CHECKPOINT, Kind.EVENT_DETAIL, Kind.EFFECT_RESULT})
_TEXT = frozenset({Kind.ERROR_TEXT, Kind.TRACEBACK})


@dataclass(frozen=True)
class Audience:
    """Who reads: whether it sees secrets, and the deployment's extra secret-name patterns.

    `name` says which reader it is in logs and docs (admin, operator, viewer, anonymous, cli).
    `patterns`: glob patterns of key names masked beyond `reliable.redact.SECRET_NAMES`
    (`reliable web --redact`), matched case-insensitively.
    """

    name: str
    sees_secrets: bool
    patterns: tuple[str, ...] = ()

    @classmethod
    def anonymous(cls, patterns: Sequence[str] = ()) -> Audience:
        """A reader nobody authenticated: an exporter's runbook page, an alert's notification."""
        return cls("anonymous", False, tuple(patterns))

    @classmethod
    def store_credentials(cls) -> Audience:
        """A `reliable` command run with the store's URL: it could read every row itself."""
        return cls("cli", True)


def _matches(key: str, patterns: Sequence[str]) -> bool:
    lowered = key.lower()
    return is_secret_name(key) or any(fnmatch.fnmatchcase(lowered, p.lower()) for p in patterns)


def _extra_names(patterns: Sequence[str]) -> tuple[str, ...]:
    # A glob's literal words count as secrets' names in free text too (holder_* -> holder).
    return tuple(word for p in patterns if (word := p.strip("*?[]")) and not any(c in word for c in "*?[]"))


def _text(text: str, patterns: Sequence[str]) -> str:
    return redact_secrets(text, extra_names=_extra_names(patterns))


def _structured(value: Any, patterns: Sequence[str]) -> Any:
    if isinstance(value, dict):
        return {k: MASK if isinstance(k, str) and _matches(k, patterns) else _structured(v, patterns)
                for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_structured(v, patterns) for v in value]
    if isinstance(value, str):
        return _text(value, patterns)
    return value


def disclose(value: Any, kind: Kind, audience: Audience) -> Any:
    """`value` of `kind` as `audience` may see it (the rules: this module's docstring). None stays None."""
    if value is None or audience.sees_secrets or kind is Kind.PUBLIC:
        return value
    if kind in _TEXT:
        return _text(str(value), audience.patterns)
    if kind in _STRUCTURED:
        return _structured(value, audience.patterns)
    raise ValueError(f"no disclosure rule for kind {kind!r}")  # pragma: no cover - every Kind is above


def disclose_json_text(text: str | None, kind: Kind, audience: Audience) -> str | None:
    """A structured value stored as JSON text (an alert fact's checkpoint) as `audience` may see it:
    parsed, disclosed and written back (unchanged when nothing in it is masked); text that does not
    parse (cut short) is masked whole."""
    if text is None or audience.sees_secrets or kind is Kind.PUBLIC:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return MASK
    shown = disclose(value, kind, audience)
    return text if shown == value else json.dumps(shown, ensure_ascii=False)  # nothing masked: the text as kept


def disclose_record(record: Mapping[str, Any], fields: Mapping[str, Kind], audience: Audience) -> dict[str, Any]:
    """A record's dict (a job, event, attempt, effect) with each field disclosed by its declared kind;
    a field `fields` does not declare is masked whole unless the audience sees secrets."""
    out: dict[str, Any] = {}
    for key, value in record.items():
        kind = fields.get(key)
        if kind is None:
            out[key] = value if audience.sees_secrets or value is None else MASK
        else:
            out[key] = disclose(value, kind, audience)
    return out


def disclosed(record: _R, fields: Mapping[str, Kind], audience: Audience) -> _R:
    """A dataclass record (a Job, JobEvent, Attempt, Effect) with its fields disclosed, of the same type
    (for a table printed from its attributes); the record itself when the audience sees secrets."""
    if audience.sees_secrets:
        return record
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(cast(Any, record))}
    return cast(_R, dataclasses.replace(cast(Any, record), **disclose_record(values, fields, audience)))


def _public(*names: str) -> dict[str, Kind]:
    return dict.fromkeys(names, Kind.PUBLIC)


#: Every field of `reliable.store.Job` and its kind.
JOB_FIELDS: Mapping[str, Kind] = {
    **_public("job_id", "queue", "actor", "status", "previous_status", "version", "lease_id", "worker_id",
              "lease_expires_at", "attempt", "attempt_id", "started_at", "finished_at", "retry_count", "retry_at",
              "scheduled_at", "dispatched_at", "pause_requested", "stop_requested", "cancel_requested",
              "stop_requested_at", "checkpoint_version", "checkpoint_schema", "checkpoint_at", "owner",
              "workflow_id", "trace_id", "parent_job_id", "last_error_class", "last_error_type", "created_at",
              "updated_at", "delivery_digest"),
    "message": Kind.ARGUMENTS,
    "checkpoint": Kind.CHECKPOINT,
    "last_error_message": Kind.ERROR_TEXT,
}

#: Every field of `reliable.store.JobEvent` and its kind.
EVENT_FIELDS: Mapping[str, Kind] = {
    **_public("id", "job_id", "at", "event", "from_status", "to_status", "version", "attempt", "attempt_id",
              "lease_id", "worker_id", "queue", "actor", "workflow_id", "trace_id", "error_class", "error_type",
              "retry_count", "operator", "reason", "host"),
    "error_message": Kind.ERROR_TEXT,
    "checkpoint": Kind.CHECKPOINT,
    "detail": Kind.EVENT_DETAIL,
    "traceback": Kind.TRACEBACK,
}

#: Every field of `reliable.store.Attempt` (plus the traceback the job page adds) and its kind.
ATTEMPT_FIELDS: Mapping[str, Kind] = {
    **_public("attempt_id", "job_id", "attempt", "lease_id", "worker_id", "started_at", "ended_at", "outcome",
              "error_class", "error_type", "checkpoint_version_start"),
    "error_message": Kind.ERROR_TEXT,
    "traceback": Kind.TRACEBACK,
}

#: Every field of `reliable.store.Effect` and its kind (an effect records its key, not its result).
EFFECT_FIELDS: Mapping[str, Kind] = {
    **_public("job_id", "op_key", "applied", "duplicates", "attempt_id", "possible_duplicate"),
}

# -- workflows and schedules (issue 28): their nodes' and slots' jobs carry job values -----------

#: Every field of a workflow's row (`WorkflowStore.listing`, `.get`) and its kind.
WORKFLOW_FIELDS: Mapping[str, Kind] = {
    **_public("workflow_id", "name", "status", "hold", "run", "owner", "created_by", "created_at", "updated_at",
              "finished_at", "checked_at", "nodes"),
}

#: Every field of a workflow node as the API shows it: its job's arguments (`message`), result and
#: last error are the job's values.
WORKFLOW_NODE_FIELDS: Mapping[str, Kind] = {
    **_public("workflow_id", "node", "position", "actor", "queue", "owner", "checkpoint_schema", "code_version",
              "digest", "trigger", "on_upstream_failure", "pass_results", "job_id", "run", "result_note",
              "job_status", "attempt", "last_error_class", "last_error_type", "finished_at", "state", "parents"),
    "message": Kind.ARGUMENTS,
    "result": Kind.EFFECT_RESULT,
    "last_error_message": Kind.ERROR_TEXT,
}

#: Every field of a workflow's event (`WorkflowStore.events`); its detail may quote a plan's changes.
WORKFLOW_EVENT_FIELDS: Mapping[str, Kind] = {
    **_public("id", "workflow_id", "at", "event", "from_status", "to_status", "run", "operator", "source",
              "reason", "host"),
    "detail": Kind.EVENT_DETAIL,
}

#: Every field of a schedule as the API shows it: its declaration carries its job's arguments.
SCHEDULE_FIELDS: Mapping[str, Kind] = {
    **_public("name", "timing", "actor", "queue", "owner", "paused", "misfire", "next_slot", "last_slot",
              "decided_until", "created_at", "updated_at", "slots_fired"),
    "definition": Kind.ARGUMENTS,
}

#: Every field of a schedule's fired slot (`reliable.schedules.storage.SlotRow`).
SLOT_FIELDS: Mapping[str, Kind] = {**_public("schedule", "slot_at", "job_id", "kind", "fired_at", "status")}

#: Every field of a schedule's audit entry; its detail may hold the declaration (`definition`, `before`).
SCHEDULE_EVENT_FIELDS: Mapping[str, Kind] = {
    **_public("id", "schedule", "at", "event", "operator", "reason", "host"),
    "detail": Kind.EVENT_DETAIL,
}
