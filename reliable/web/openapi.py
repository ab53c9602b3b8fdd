"""The OpenAPI 3.1 document of the HTTP API (/api/v1), as data: `document()`.

It describes every route of `reliable.web.api` and of the bulk operations (`reliable.web.operations`).
A test walks the app's routes and checks each has a path here and that the document validates, so
it cannot silently drift from the code. docs/api.md is the prose reference.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from .. import __version__
from ..disclosure import EVENT_FIELDS, Kind
from ..operations import STATUSES
from ..operators import SYNONYMS
from ..states import JobStatus
from ..store import JobEvent
from .api import ALERT_STATES, COMMANDS, DEFAULT_EVENT_LIMIT, DEFAULT_LIMIT, MAX_LIMIT, RESOLUTIONS
from .auth import authenticate
from .bodies import MAX_BODY_BYTES
from .console_alerts import MAX_PAGE as ALERT_MAX_PAGE
from .console_alerts import PAGE as ALERT_PAGE
from .openapi_flows import FLOW_PATHS, FLOW_SCHEMAS  # c28-flows: workflows and schedules

__all__ = ["COMMAND_PATHS", "document", "openapi_document", "routes"]

_STATES = [s.value for s in JobStatus]
_COMMANDS = list(COMMANDS)

#: POST /api/v1/jobs/{job_id}/{command}: one path per command, each with its own request body.
COMMAND_PATHS: tuple[str, ...] = tuple(f"/api/v1/jobs/{{job_id}}/{c}" for c in _COMMANDS)


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable(kind: str) -> dict[str, Any]:
    return {"type": [kind, "null"]}


def _q(name: str, description: str, schema: dict[str, Any], *, many: bool = False) -> dict[str, Any]:
    if many:
        return {"name": name, "in": "query", "description": description, "style": "form", "explode": True,
                "schema": {"type": "array", "items": schema}}
    return {"name": name, "in": "query", "description": description, "schema": schema}


_TIME = {"type": "string", "description": "epoch seconds (1767225600.5) or ISO 8601 (2026-01-01T00:00:00Z)"}

_FILTER_PARAMS: list[dict[str, Any]] = [
    _q("queue", "only jobs of this queue", {"type": "string"}),
    _q("actor", "only jobs of this actor", {"type": "string"}),
    _q("owner", "only jobs of this owner", {"type": "string"}),
    _q("error_class", "only jobs whose last error has this class (transient, permanent...)", {"type": "string"}),
    _q("workflow", "only jobs of this workflow id", {"type": "string"}),
    _q("changed_since", "only jobs whose last change was at or after this time", _TIME),
    _q("changed_until", "only jobs whose last change was before this time", _TIME),
    _q("q", "case-insensitive text in the job's message (arguments and options); 403 unless the caller "
           "sees every job's arguments (admin)", {"type": "string"}),
    _q("limit", "jobs per page", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT, "default": DEFAULT_LIMIT}),
    _q("cursor", "the next_cursor of the previous page", {"type": "string"}),
]
_STATE_PARAM = _q("state", "only jobs in these states (repeatable, any case)", {"type": "string",
                  "enum": _STATES + [s.lower() for s in _STATES]}, many=True)
_JOB_ID = {"name": "job_id", "in": "path", "required": True,
           "description": "a job id, or a prefix of at least 6 characters that starts exactly one job's id",
           "schema": {"type": "string"}}
_OPERATION_ID = {"name": "operation_id", "in": "path", "required": True, "schema": {"type": "string"}}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


_ERROR = _json(_ref("Error"), "the error")
_ERRORS = {"400": {**_ERROR, "description": "a bad parameter or body (the message names it)"},
           "401": {**_ERROR, "description": "not authenticated"}}
#: Every route that takes a body (docs/api.md, reliable/web/bodies.py).
_TOO_LARGE = {"413": {**_ERROR, "description": f"the body is larger than {MAX_BODY_BYTES} bytes"}}
_JOB_ERRORS = {**_ERRORS, "404": {**_ERROR, "description": "no job with that id or prefix"},
               "409": {**_ERROR, "description": "the prefix starts several jobs' ids (candidates lists them)"}}
_COMMAND_ERRORS = {**_JOB_ERRORS,
                   "403": {**_ERROR, "description": "not authorized (the refusal is audited on the job)"},
                   "409": {**_ERROR, "description": "refused in the job's state or by its contract (audited on "
                                                    "the job), or an ambiguous prefix"}}


def _get(summary: str, schema: dict[str, Any], params: list[dict[str, Any]] | None = None,
         errors: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"get": {"summary": summary, "parameters": params or [],
                    "responses": {"200": _json(schema), **(_ERRORS if errors is None else errors)}, **extra}}


def _command(command: str) -> dict[str, Any]:
    body = _ref("ReconcileRequest" if command == "reconcile" else "RestartRequest"
                if command in ("restart", "requeue", "retry") else "CommandRequest")
    summary = {alias: f"{canonical} (the same command)" for alias, canonical in SYNONYMS.items()}.get(command, command)
    return {"post": {"summary": f"{summary} one job", "operationId": f"job_{command}", "parameters": [_JOB_ID],
                     "requestBody": {"required": True, "content": {"application/json": {"schema": body}}},
                     "responses": {"200": _json(_ref("CommandResult")), **_COMMAND_ERRORS, **_TOO_LARGE}}}


_PATHS: dict[str, Any] = {
    "/api/v1/whoami": _get("the authenticated principal", _ref("Principal"), operationId="whoami"),
    "/api/v1/openapi.json": _get("this document", {"type": "object"}, operationId="openapi"),
    "/api/v1/jobs": _get("jobs matching the filters, newest change first", _ref("JobPage"),
                         [_STATE_PARAM, *_FILTER_PARAMS], operationId="list_jobs"),
    "/api/v1/jobs/{job_id}": _get(
        "a job's whole story: job, contract, attempts, effects, events, available actions", _ref("JobDetail"),
        [_JOB_ID, _q("event", "only events of these names", {"type": "string"}, many=True),
         _q("since", "only events at or after this time", _TIME),
         _q("before", "only events older than the event of this id (a page's older_events)",
            {"type": "integer", "minimum": 1}),
         _q("event_limit", "the most recent events", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                                                      "default": DEFAULT_EVENT_LIMIT})],
        _JOB_ERRORS, operationId="get_job"),
    "/api/v1/jobs/{job_id}/events": _get(
        "a job's event history, oldest first", _ref("EventList"),
        [_JOB_ID, _q("event", "only events of these names", {"type": "string"}, many=True),
         _q("since", "only events at or after this time", _TIME),
         _q("before", "only events older than the event of this id (a page's older_events)",
            {"type": "integer", "minimum": 1}),
         _q("limit", "the most recent events", {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                                                 "default": DEFAULT_EVENT_LIMIT})],
        _JOB_ERRORS, operationId="job_events"),
    "/api/v1/jobs/{job_id}/message": _get(
        "a job's whole message (masked for read-only callers), which its detail leaves out above 64 KiB",
        _ref("JobMessage"), [_JOB_ID], _JOB_ERRORS, operationId="job_message"),
    **{path: _command(c) for path, c in zip(COMMAND_PATHS, _COMMANDS, strict=True)},
    "/api/v1/dlq": _get("dead letters: DEAD jobs not discarded since they died", _ref("JobPage"),
                        [*_FILTER_PARAMS, _q("include_discarded", "list discarded DEAD jobs too",
                                           {"type": "boolean", "default": False})], operationId="dlq"),
    "/api/v1/review": _get("REVIEW jobs: an ambiguous side effect waits for a person", _ref("JobPage"),
                           _FILTER_PARAMS, operationId="review"),
    "/api/v1/queues": _get("a page of the queues by name: per queue, jobs per state, oldest due PENDING job, "
                           "throughput, failure rate, wait and run p50/p95, pause", _ref("QueueList"),
                           [_q("limit", "queues per page", {"type": "integer", "minimum": 1, "maximum": 1000,
                                                            "default": 100}),
                            _q("cursor", "the next_cursor of the previous page", {"type": "string"}),
                            _q("search", "only the queues whose name holds this (case-insensitive)",
                               {"type": "string"})],
                           operationId="queues"),
    "/api/v1/overview": _get("counts per state and queue, dead letters, review, per-minute series",
                             _ref("Overview"), operationId="overview"),
    "/api/v1/alerts": _get("a page of the alerts (the store evaluator's and Alertmanager's), firing first",
                           _ref("AlertList"),
                           [_q("state", "only alerts in this state",
                               {"type": "string", "enum": list(ALERT_STATES)}),
                            _q("limit", "alerts per page", {"type": "integer", "minimum": 1,
                                                            "maximum": ALERT_MAX_PAGE, "default": ALERT_PAGE}),
                            _q("cursor", "the next_cursor of the previous page", {"type": "string"})],
                           operationId="alerts"),
    "/api/v1/operations": {
        "post": {"summary": "count the jobs a filter selects for a bulk command; confirm to run it",
                 "operationId": "create_operation",
                 "requestBody": {"required": True,
                                 "content": {"application/json": {"schema": _ref("OperationRequest")}}},
                 "responses": {"201": _json(_ref("OperationCreated"), "counted; awaiting confirmation"),
                               "200": _json(_ref("OperationCreated"), "dry_run: counted only, nothing stored"),
                               **_ERRORS, **_TOO_LARGE, "403": {**_ERROR, "description": "not authorized"}}},
        **_get("bulk operations, newest first", _ref("OperationList"), operationId="list_operations"),
    },
    "/api/v1/operations/{operation_id}": _get(
        "one bulk operation and its progress", _ref("Operation"), [_OPERATION_ID],
        {**_ERRORS, "404": {**_ERROR, "description": "no such operation"}}, operationId="get_operation"),
    "/api/v1/operations/{operation_id}/confirm": {"post": {
        "summary": "confirm a counted operation: it starts running", "operationId": "confirm_operation",
        "parameters": [_OPERATION_ID],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("ConfirmRequest")}}},
        "responses": {"202": _json(_ref("Operation"), "running"), **_ERRORS, **_TOO_LARGE,
                      "403": {**_ERROR, "description": "not authorized"},
                      "404": {**_ERROR, "description": "no such operation"},
                      "409": {**_ERROR, "description": "wrong token, expired or not awaiting confirmation"}}}},
    "/api/v1/operations/{operation_id}/cancel": {"post": {
        "summary": "cancel a bulk operation (jobs already acted on stay so)", "operationId": "cancel_operation",
        "parameters": [_OPERATION_ID],
        "responses": {"200": _json(_ref("Operation")), **_ERRORS, **_TOO_LARGE,
                      "403": {**_ERROR, "description": "not authorized"},
                      "404": {**_ERROR, "description": "no such operation"},
                      "409": {**_ERROR, "description": "finished already"}}}},
}

# -- c28-workers: the fleet (reliable.web.workers) --
_PATHS["/api/v1/workers"] = _get(
    "a page of the live worker processes (with what each busy thread runs now) and the most recent exits",
    _ref("WorkerList"),
    [_q("host", "only this host's processes", {"type": "string"}),
     _q("exited", "how many recent exits", {"type": "integer", "minimum": 0, "maximum": 1000, "default": 50}),
     _q("limit", "live processes per page", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
     _q("cursor", "the next_cursor of the previous page", {"type": "string"}),
     _q("include", "held_jobs: the deprecated held_jobs list too (the jobs of busy_threads again)",
        {"type": "string", "enum": ["held_jobs"]})],
    operationId="workers")
# -- end c28-workers --


def _worker_command(command: str, summary: str) -> dict[str, Any]:
    return {"summary": summary, "operationId": f"worker_{command}",
            "requestBody": {"required": True,
                            "content": {"application/json": {"schema": _ref("WorkerCommandRequest")}}},
            "responses": {"200": _json(_ref("WorkerCommandResult")), **_ERRORS, **_TOO_LARGE,
                          "403": {**_ERROR, "description": "not authorized (audited on the process)"},
                          "404": {**_ERROR, "description": "no worker process with that id on record"},
                          "409": {**_ERROR, "description": "the process has exited"}}}


_WORKER = {"name": "worker_id", "in": "path", "required": True, "schema": {"type": "string"}}
_PATHS["/api/v1/workers/{worker_id}/quiet"] = {"post": {
    **_worker_command("quiet", "quiet a worker process: it takes no new message and finishes the running ones "
                               "(picked up by its next heartbeat)"), "parameters": [_WORKER]}}
_PATHS["/api/v1/workers/{worker_id}/resume"] = {"post": {
    **_worker_command("resume", "resume a quiet worker process: it takes messages again (picked up by its next "
                                "heartbeat)"), "parameters": [_WORKER]}}
_PATHS["/api/v1/workers/{worker_id}/resume"]["post"]["responses"]["409"] = {
    **_ERROR, "description": "the process has exited, or is not quiet (no command, or told to stop)"}
_PATHS["/api/v1/workers/{worker_id}/stop"] = {"post": {
    **_worker_command("stop", "stop a worker process: it finishes its running jobs and exits, as on SIGTERM "
                              "(picked up by its next heartbeat)"), "parameters": [_WORKER]}}


# -- issue 42: operators' concurrency limits (reliable.web.limits) --
_PATHS["/api/v1/limits"] = _get(
    "a page of the actors with a concurrency limit: declared, effective now, the operator's cap", _ref("LimitList"),
    [_q("limit", "actors per page", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
     _q("cursor", "the next_cursor of the previous page", {"type": "string"})], operationId="limits")
_PATHS["/api/v1/limits/{actor}/concurrency"] = {"post": {
    "summary": "cap an actor's concurrency (1 to its declared one; null clears the cap), audited",
    "operationId": "limit_set",
    "parameters": [{"name": "actor", "in": "path", "required": True, "schema": {"type": "string"}}],
    "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("LimitSetRequest")}}},
    "responses": {"200": _json(_ref("LimitSetResult")), **_ERRORS, **_TOO_LARGE,
                  "403": {**_ERROR, "description": "not authorized (audited on the actor's limit)"},
                  "404": {**_ERROR, "description": "the actor has no concurrency limit in the store"}}}}
# -- end issue 42 --


# -- queue pause / resume (issue 28, c28-queues) ---------------------------------------------------
_QUEUE = {"name": "queue", "in": "path", "required": True, "schema": {"type": "string"}}


def _queue_command(command: str, summary: str) -> dict[str, Any]:
    return {"post": {"summary": summary, "operationId": f"queue_{command}", "parameters": [_QUEUE],
                     "requestBody": {"required": True,
                                     "content": {"application/json": {"schema": _ref("QueueCommandRequest")}}},
                     "responses": {"200": _json(_ref("QueueCommandResult")), **_ERRORS, **_TOO_LARGE,
                                   "403": {**_ERROR, "description": "not authorized (audited on the queue)"}}}}


_PATHS["/api/v1/queues/{queue}/pause"] = _queue_command(
    "pause", "pause a queue: workers put its deliveries off (no attempt spent); RUNNING jobs go on")
_PATHS["/api/v1/queues/{queue}/resume"] = _queue_command("resume", "resume a paused queue")
# -- end queue pause / resume -----------------------------------------------------------------------

_N_STR, _N_NUM, _N_INT = _nullable("string"), _nullable("number"), _nullable("integer")
_OPEN = {"type": "object", "additionalProperties": True}
_MASKED = "(masked for callers who may not act on the job: docs/redaction.md)"

_JOB_FIELDS: dict[str, Any] = {
    "job_id": {"type": "string"}, "queue": {"type": "string"}, "actor": {"type": "string"},
    "message": {**_OPEN, "description": f"args, kwargs, options {_MASKED}: in a job's detail only, null "
                                        "there above 64 KiB (message_cut; GET /api/v1/jobs/{job_id}/message has it)"},
    "message_cut": {"type": ["object", "null"], "additionalProperties": True,
                    "description": "in a job's detail: {bytes, limit} when the message was left out"},
    "status": {"type": "string", "enum": _STATES}, "previous_status": {"type": ["string", "null"]},
    "version": {"type": "integer"}, "lease_id": {"type": "integer"}, "worker_id": _N_STR,
    "lease_expires_at": _N_NUM, "attempt": {"type": "integer"}, "attempt_id": _N_STR, "started_at": _N_NUM,
    "finished_at": _N_NUM, "retry_count": {"type": "integer"}, "retry_at": _N_NUM, "scheduled_at": _N_NUM,
    "dispatched_at": _N_NUM, "pause_requested": {"type": "boolean"}, "stop_requested": {"type": "boolean"},
    "cancel_requested": {"type": "boolean"}, "stop_requested_at": _N_NUM,
    "checkpoint": {"description": f"any JSON value {_MASKED}"},
    "checkpoint_version": {"type": "integer"}, "checkpoint_schema": _N_INT, "checkpoint_at": _N_NUM,
    "owner": _N_STR, "workflow_id": _N_STR, "trace_id": _N_STR, "parent_job_id": _N_STR,
    "last_error_class": _N_STR, "last_error_type": _N_STR,
    "last_error_message": {**_N_STR, "description": f"secrets' values {_MASKED}"},
    "created_at": {"type": "number"}, "updated_at": {"type": "number"},
    "delivery_digest": {**_N_STR, "description": "what a delivery must carry to claim the job (docs/concepts.md)"},
}

#: An annotation of a record's field (reliable.store's dataclasses) -> its JSON schema.
_FIELD_TYPES: dict[str, dict[str, Any]] = {
    "int": {"type": "integer"}, "float": {"type": "number"}, "str": {"type": "string"}, "int | None": _N_INT,
    "float | None": _N_NUM, "str | None": _N_STR, "Any": {}, "dict[str, Any]": _OPEN,
}
#: What a field of each masked kind says about its masking.
_KIND_NOTES: dict[Kind, str] = {
    Kind.ERROR_TEXT: f"secrets' values {_MASKED}", Kind.TRACEBACK: f"secrets' values {_MASKED}",
    Kind.CHECKPOINT: f"any JSON value {_MASKED}", Kind.EVENT_DETAIL: f"e.g. a policy decision {_MASKED}",
}


def _fields_of(record: type, kinds: Mapping[str, Kind]) -> dict[str, Any]:
    """The JSON schema of each field of the dataclass `record`: its type, and its masking by `kinds`."""
    return {f.name: {**_FIELD_TYPES[str(f.type)],
                     **({"description": _KIND_NOTES[kinds[f.name]]} if kinds[f.name] in _KIND_NOTES else {})}
            for f in dataclasses.fields(record)}


_EVENT_FIELDS: dict[str, Any] = _fields_of(JobEvent, EVENT_FIELDS)

_FILTER = {"type": "object", "additionalProperties": False, "description": "the jobs list's filters",
           "properties": {"state": {"type": "array", "items": {"type": "string"}}, "queue": {"type": "string"},
                          "actor": {"type": "string"}, "owner": {"type": "string"},
                          "error_class": {"type": "string"}, "workflow": {"type": "string"},
                          "changed_since": {"type": ["number", "string"]},
                          "changed_until": {"type": ["number", "string"]}, "q": {"type": "string"},
                          "exclude_discarded": {"type": "boolean", "default": False,
                                                "description": "bulk operations only: leave out DEAD jobs "
                                                "discarded since their last change (the dead-letter view)"}}}

_OPERATION_FIELDS: dict[str, Any] = {
    "operation_id": {"type": "string"}, "command": {"type": "string"}, "filter": _OPEN,
    "status": {"type": "string", "enum": list(STATUSES)},
    "total": {"type": "integer"}, "done": {"type": "integer"}, "counts": _OPEN, "reason": {"type": "string"},
    "operator": {"type": "string"}, "rate": _N_NUM, "created_at": {"type": "number"},
    "expires_at": {"type": "number"}, "confirmed_at": _N_NUM, "confirmed_by": _N_STR, "finished_at": _N_NUM,
    "results": {"type": "array", "items": _OPEN},
    "would_refuse": {"type": "integer", "description": "counted jobs the command would refuse, at preview (its "
                     "own dry run on each: state, idempotency, the caller's role...)"},
    "refusals": {"type": "array", "description": "those refusals grouped by why, most frequent first",
                 "items": {"type": "object", "properties": {"why": {"type": "string"}, "count": {"type": "integer"},
                                                      "hint": _N_STR}}},
    "all_refused": {"type": "boolean", "description": "it acted on jobs and refused every one (nothing changed)"},
    "counted_digest": {"type": "string", "description": "sha256 of the counted job ids: POST it to .../confirm "
                       "instead of the token (its creator or an admin, confirming the set it was shown)"},
    "changes_nothing": {"type": "boolean", "description": "the preview found every counted job refused: "
                        "confirming would change nothing as they stood"},
    "expired": {"type": "boolean", "description": "not confirmed before expires_at: it can no longer be"},
}


def _object(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties) if required is None
            else required, **extra}


_COMMAND_BODY = {"reason": {"type": "string", "minLength": 1, "description": "why (recorded on the job)"},
                 "dry_run": {"type": "boolean", "default": False}}

_SCHEMAS: dict[str, Any] = {
    "Error": _object({"error": _object({"status": {"type": "integer"}, "message": {"type": "string"},
                                        "type": {"type": "string"},
                                        "candidates": {"type": "array", "items": {"type": "string"}}},
                                       ["status", "message", "type"])}),
    "Principal": _object({"name": {"type": "string"}, "role": {"type": "string", "enum": ["viewer", "operator",
                                                                                         "admin"]},
                          "source": {"type": "string"}, "token_id": _N_STR,
                          "queues": {"type": "array", "items": {"type": "string"}},
                          "owners": {"type": "array", "items": {"type": "string"}}, "may_act": {"type": "boolean"}}),
    "Job": _object(_JOB_FIELDS, ["job_id", "queue", "actor", "status", "version", "updated_at"]),
    "JobPage": _object({"jobs": {"type": "array", "items": _ref("Job")}, "next_cursor": _N_STR}),
    "Event": _object(_EVENT_FIELDS, ["id", "job_id", "at", "event"]),
    "JobMessage": _object({"job_id": {"type": "string"}, "message": _OPEN}),
    "EventList": _object({"job_id": {"type": "string"}, "events": {"type": "array", "items": _ref("Event")}}),
    "Action": _object({"command": {"type": "string"}, "allowed": {"type": "boolean"}, "message": {"type": "string"},
                       "needs_duplicate_confirmation": {"type": "boolean"},
                       "warnings": {"type": "array", "items": {"type": "string"}},
                       "permitted": {"type": "boolean", "description": "the caller's role allows it on this job"}}),
    "JobDetail": _object({"job": _ref("Job"), "contract": _OPEN, "attempts": {"type": "array", "items": _OPEN},
                          "effects": {"type": "array", "items": _OPEN},
                          "events": {"type": "array", "items": _ref("Event")},
                          "older_events": {"type": ["integer", "null"],
                                           "description": "the ?before= of the next (older) page; null: none"},
                          "last_command": {"oneOf": [{"type": "null"}, _object({
                              "event": {"type": "string"}, "operator": _N_STR, "reason": _N_STR,
                              "at": {"type": "number"}})],
                              "description": "the last command an operator ran on the job"},
                          "actions": {"type": "array", "items": _ref("Action")}}),
    "CommandRequest": _object(_COMMAND_BODY, ["reason"], additionalProperties=False),
    "RestartRequest": _object({**_COMMAND_BODY, "allow_duplicate_side_effects": {
        "type": "boolean", "default": False,
        "description": "run a non-idempotent job again although its side effect may repeat"}},
        ["reason"], additionalProperties=False),
    "ReconcileRequest": _object({**_COMMAND_BODY, "resolution": {"type": "string",
                                                                 "enum": list(RESOLUTIONS)}},
                                ["reason", "resolution"], additionalProperties=False),
    "CommandResult": _object({
        "command": {"type": "string"}, "job_id": {"type": "string"},
        "outcome": {"type": "string", "enum": ["done", "requested", "dry_run", "refused"]},
        "message": {"type": "string"}, "event": _N_STR, "status_before": _N_STR, "status": _N_STR,
        "version": _N_INT, "dispatched": {"type": "boolean"}, "compensation": _N_STR,
        "warnings": {"type": "array", "items": {"type": "string"}}}),
    "Queue": _object({"queue": {"type": "string"},
                      "by_state": {"type": "object", "additionalProperties": {"type": "integer"}},
                      "oldest_pending_at": _N_NUM, "oldest_pending_age_seconds": _N_NUM,
                      "finished": {"type": "integer", "description": "jobs that reached a final state in the window"},
                      "throughput_per_hour": _N_NUM,
                      "failure_rate": {**_N_NUM, "description": "FAILED (in the window), DEAD and REVIEW (now) among "
                                                                 "them and SUCCEEDED (in the window)"},
                      "paused": {"oneOf": [{"type": "null"}, _ref("QueuePause")]},
                      "broker": {"description": "RabbitMQ's depths (`reliable web --broker`; null without)",
                                 "oneOf": [{"type": "null"}, _object({
                                     "ready": _N_INT, "delayed": _N_INT, "dead": _N_INT,
                                     "consumers": {"type": "integer"}})]}}),
    "QueuePause": _object({"queue": {"type": "string"}, "paused_at": {"type": "number"},
                           "operator": {"type": "string"}, "host": _N_STR, "source": _N_STR,
                           "reason": {"type": "string"}, "paused_seconds": {"type": "number"}}),
    "QueueCommandRequest": _object({"reason": {"type": "string", "description": "why (required, audited)"}},
                                   ["reason"], additionalProperties=False),
    "QueueCommandResult": _object({"queue": {"type": "string"},
                                   "command": {"type": "string", "enum": ["pause", "resume"]},
                                   "changed": {"type": "boolean", "description": "false: it already was so"},
                                   "paused": {"type": "boolean"}, "operator": {"type": "string"}}),
    "QueueList": _object({"now": {"type": "number"}, "window_seconds": {"type": "number"},
                          "queues": {"type": "array", "items": _ref("Queue")},
                          "total": {"type": "integer", "description": "the queues matching (every page)"},
                          "next_cursor": _N_STR}),
    "Overview": _object({
        "now": {"type": "number"}, "window_seconds": {"type": "number"},
        "counts": {"type": "array", "items": _object({"state": {"type": "string"}, "queue": {"type": "string"},
                                                      "jobs": {"type": "integer"}})},
        "by_state": {"type": "object", "additionalProperties": {"type": "integer"}},
        "oldest_pending": {"type": "object", "additionalProperties": _N_NUM},
        "queues": {"type": "array", "items": {"type": "string"}}, "queues_total": {"type": "integer"},
        "queues_url": {"type": "string"},
        "dead_letters": {"type": "integer"}, "review": {"type": "integer"},
        "series": _object({"minutes": {"type": "array", "items": {"type": "number"}},
                           "successes": {"type": "array", "items": {"type": "integer"}},
                           "failures": {"type": "array", "items": {"type": "integer"}}})}),
    "Alert": _object({
        "fingerprint": {"type": "string"}, "alertname": {"type": "string"},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "state": {"type": "string", "enum": list(ALERT_STATES)}, "pending_since": _N_NUM,
        "starts_at": _N_NUM, "ends_at": _N_NUM, "last_evaluated_at": _N_NUM, "last_sent_at": _N_NUM,
        "next_send_at": _N_NUM, "send_attempts": {"type": "integer"}, "last_error": _N_STR}),
    "AlertList": _object({"alerts": {"type": "array", "items": _ref("Alert")},
                          "next_cursor": {**_N_STR, "description": "null: the last page"},
                          "total": {"type": "integer", "description": "alerts listed over every page"}}),
    "OperationRequest": _object({
        "command": {"type": "string", "enum": _COMMANDS}, "filter": _FILTER, **_COMMAND_BODY,
        "options": {"type": "object", "description": "command options: allow_duplicate_side_effects, resolution",
                    "properties": {"allow_duplicate_side_effects": {"type": "boolean"},
                                   "resolution": {"type": "string", "enum": list(RESOLUTIONS)}}},
        "rate": {"type": "number", "exclusiveMinimum": 0, "description": "jobs per second"}},
        ["command", "filter", "reason"]),
    "OperationCreated": _object({
        **_OPERATION_FIELDS,
        "confirm_token": {"type": ["string", "null"],
                          "description": "shown once; POST it to .../confirm (null for a dry run)"},
        "not_permitted": {"type": "integer", "description": "counted jobs it may not run this command on"},
        "sample": {"type": "array", "items": {"type": "string"}, "description": "the first counted job ids"},
        "sample_jobs": {"type": "array", "items": _ref("Job")}},
        ["operation_id", "status", "total", "confirm_token", "expires_at", "sample"], additionalProperties=True),
    "Operation": _object(_OPERATION_FIELDS, ["operation_id", "command", "status", "total"],
                         additionalProperties=True),
    "OperationList": _object({"operations": {"type": "array", "items": _ref("Operation")}}),
    "ConfirmRequest": {"oneOf": [_object({"confirm_token": {"type": "string"}}, additionalProperties=False),
                                 _object({"counted_digest": {"type": "string"}}, additionalProperties=False)]},
}

# -- c28-workers: the fleet (reliable.store.worker_views) --
_SCHEMAS["HeldJob"] = _object({"job_id": {"type": "string"}, "queue": {"type": "string"},
                               "actor": {"type": "string"}, "status": {"type": "string", "enum": _STATES},
                               "started_at": _N_NUM, "thread": {**_N_STR, "description": "null: not reported yet"}})
_SCHEMAS["BusyThread"] = _object({"thread": {**_N_STR, "description": "null: the job was claimed after the "
                                             "process's last heartbeat"},
                                  "job_id": {"type": "string"}, "actor": {"type": "string"},
                                  "queue": {"type": "string"}, "status": {"type": "string", "enum": _STATES},
                                  "started_at": _N_NUM})
_SCHEMAS["WorkerCommandRequest"] = _object({"reason": {"type": "string", "description": "why (required, audited)"}},
                                           ["reason"], additionalProperties=False)
_SCHEMAS["WorkerCommandResult"] = _object({
    "worker_id": {"type": "string"}, "command": {"type": "string", "enum": ["quiet", "resume", "stop"]},
    "changed": {"type": "boolean", "description": "false: it had that command (or a stop) already (a resume "
                                                  "of a process not quiet is a 409)"},
    "operator": {"type": "string"}})
_WORKER_PROCESS: dict[str, Any] = {
    "worker_id": {"type": "string"}, "host": {"type": "string"}, "pid": {"type": "integer"},
    "start_ticks": _N_INT, "boot_id": _N_STR,
    "host_instance": {**_N_STR, "description": "the host's random id of its boot: tells cloned hosts apart"},
    "queues": {"type": ["array", "null"], "items": {"type": "string"}, "description": "null: every queue"},
    "threads": _N_INT, "supervisor_pid": _N_INT, "started_at": {"type": "number"},
    "last_beat_at": {"type": "number"}, "exited_at": _N_NUM,
    "exit_reason": {**_N_STR, "description": "stopped, pid_gone or pid_reused"}, "exit_observed_by": _N_STR,
    "jobs_held": {"type": "integer", "description": "RUNNING/STOPPING jobs whose lease it holds now"},
    "held_jobs": {"type": "array", "items": _ref("HeldJob"), "deprecated": True,
                  "description": "only with ?include=held_jobs: the jobs of busy_threads again"},
    "busy_threads": {"type": "array", "items": _ref("BusyThread")},
    "slot": {**_N_INT, "description": "its slot in its `reliable worker` supervisor"},
    "restarts": {**_N_INT, "description": "children its supervisor's slot had before it (null: no supervisor)"},
    "command": {"type": ["string", "null"], "enum": ["quiet", "stop", None],
                "description": "the last operator command (reliable.process_commands; null again "
                                               "after a resume)"},
    "command_at": _N_NUM, "command_operator": _N_STR, "command_reason": _N_STR,
    "command_seen_at": {**_N_NUM, "description": "when its heartbeat picked the command up"},
    "quiet": {"type": "boolean", "description": "told to take no new message (quiet or stop)"},
    "silent_seconds": {"type": "number", "description": "since its last heartbeat (to its exit, once exited)"},
    "silent": {"type": "boolean", "description": "not marked exited, no heartbeat within live_within_seconds"}}
_SCHEMAS["WorkerProcess"] = _object(_WORKER_PROCESS, [name for name in _WORKER_PROCESS if name != "held_jobs"])
_SCHEMAS["WorkerList"] = _object({"now": {"type": "number"}, "live_within_seconds": {"type": "number"},
                                  "live_total": {"type": "integer", "description": "live processes (every page)"},
                                  "next_cursor": {**_N_STR, "description": "null: the last page"},
                                  "workers": {"type": "array", "items": _ref("WorkerProcess")},
                                  "exited": {"type": "array", "items": _ref("WorkerProcess")}})
# -- end c28-workers --
_SCHEMAS["Limit"] = _object({
    "actor": {"type": "string"}, "declared": {"type": "integer", "description": "limits={'concurrency': N}"},
    "effective": {"type": "integer", "description": "now (the adaptive limit may have lowered it)"},
    "ceiling": {**_N_INT, "description": "the operator's cap (null: none)"}, "streak": {"type": "integer"},
    "changed_at": _N_NUM})
_SCHEMAS["LimitList"] = _object({"limits": {"type": "array", "items": _ref("Limit")},
                                 "next_cursor": {**_N_STR, "description": "null: the last page"}})
_SCHEMAS["LimitSetRequest"] = _object({
    "concurrency": {"type": ["integer", "null"], "minimum": 1, "description": "null: clear the cap"},
    "reason": {"type": "string", "description": "why (required, audited)"}}, ["concurrency", "reason"],
    additionalProperties=False)
_SCHEMAS["LimitSetResult"] = _object({"actor": {"type": "string"}, "before": _ref("Limit"), "after": _ref("Limit"),
                                      "operator": {"type": "string"}})

_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "reliable HTTP API", "version": __version__,
             "description": "Read jobs and act on them through reliable's control plane. Every command is "
                            "authorized and audited by Control as the token's name. Times are epoch seconds."},
    "servers": [{"url": "/"}],
    "security": [{"bearer": []}],
    "paths": {**_PATHS, **FLOW_PATHS},  # c28-flows
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "rel_<id>_<secret>",
                                       "description": "an API token: `reliable tokens create NAME --role ...`"}},
        "schemas": {**_SCHEMAS, **FLOW_SCHEMAS},  # c28-flows
    },
}


def document(*, server: str = "/") -> dict[str, Any]:
    """The OpenAPI 3.1 document (a fresh copy); `server`: the path the app is mounted under."""
    doc = copy.deepcopy(_DOCUMENT)
    doc["servers"] = [{"url": server or "/"}]
    return doc


async def openapi_document(request: Request) -> JSONResponse:
    """GET /api/v1/openapi.json: the OpenAPI 3.1 document of this API (served under the app's root path)."""
    await authenticate(request)
    return JSONResponse(document(server=request.scope.get("root_path") or "/"))


def routes() -> list[BaseRoute]:
    """The route serving the document (beside the API's own: it describes them, so it imports them)."""
    return [Route("/api/v1/openapi.json", openapi_document, methods=["GET"], name="api_openapi_document")]
