"""The OpenAPI paths and schemas of the workflow and schedule routes (`reliable.web.flows_api`),
merged into `reliable.web.openapi.document()`."""

from __future__ import annotations

from typing import Any

from ..store.workflow_views import WorkflowStatus
from .flows import SCHEDULE_ACTIONS, WORKFLOW_ACTIONS

__all__ = ["FLOW_PATHS", "FLOW_SCHEMAS"]

_MASKED = "(masked for callers who may not act on the node's or schedule's queue: docs/redaction.md)"
_OPEN = {"type": "object", "additionalProperties": True}
_N_STR, _N_NUM, _N_INT = {"type": ["string", "null"]}, {"type": ["number", "null"]}, {"type": ["integer", "null"]}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _error(description: str) -> dict[str, Any]:
    return _json(_ref("Error"), description)


_ERRORS = {"400": _error("a bad parameter or body (the message names it)"), "401": _error("not authenticated")}
_WORKFLOW_ID = {"name": "workflow_id", "in": "path", "required": True, "schema": {"type": "string"},
                "description": "a workflow id, or a prefix of at least 6 characters that starts exactly one"}
_NAME = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}


def _limit(default: int) -> dict[str, Any]:
    return {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 500,
                                                        "default": default}}


def _workflow_command(command: str) -> dict[str, Any]:
    body = "WorkflowRerunRequest" if command in ("resume", "restart") else "WorkflowCommandRequest"
    return {"post": {
        "summary": f"{command} a workflow (every node's queue and owner must allow it; audited on the workflow)",
        "operationId": f"workflow_{command}", "parameters": [_WORKFLOW_ID],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(body)}}},
        "responses": {"200": _json(_ref("WorkflowCommandResult"), "done, or the plan of a dry run"), **_ERRORS,
                      "403": {**_json(_ref("WorkflowCommandResult")),
                              "description": "not authorized on some node (recorded as command_refused)"},
                      "404": _error("no workflow with that id or prefix"),
                      "409": {**_json(_ref("WorkflowCommandResult")),
                              "description": "refused in the workflow's state (recorded as command_refused)"}}}}


def _schedule_command(command: str) -> dict[str, Any]:
    return {"post": {
        "summary": f"{command} a schedule (audited in its trail)", "operationId": f"schedule_{command}",
        "parameters": [_NAME],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("ScheduleRequest")}}},
        "responses": {"200": _json(_ref("ScheduleCommandResult")), **_ERRORS,
                      "403": {**_json(_ref("ScheduleCommandResult")),
                              "description": "not authorized on its queue (recorded as command_refused)"},
                      "404": _error("no such schedule")}}}


FLOW_PATHS: dict[str, Any] = {
    "/api/v1/workflows": {"get": {
        "summary": "workflows, newest first", "operationId": "workflows",
        "parameters": [{"name": "status", "in": "query", "style": "form", "explode": True,
                        "schema": {"type": "array", "items": {"type": "string", "enum": list(WorkflowStatus.ALL)}}},
                       {"name": "name", "in": "query", "style": "form", "explode": True,
                        "schema": {"type": "array", "items": {"type": "string"}}}, _limit(50)],
        "responses": {"200": _json(_ref("WorkflowList")), **_ERRORS}}},
    "/api/v1/workflows/{workflow_id}": {"get": {
        "summary": "a workflow: its nodes with their states, jobs and errors, its edges and history",
        "operationId": "workflow", "parameters": [_WORKFLOW_ID],
        "responses": {"200": _json(_ref("WorkflowDetail")), **_ERRORS,
                      "404": _error("no workflow with that id or prefix")}}},
    **{f"/api/v1/workflows/{{workflow_id}}/{c}": _workflow_command(c) for c in WORKFLOW_ACTIONS},
    "/api/v1/schedules": {"get": {
        "summary": "every stored schedule: timing, state, next and last slot", "operationId": "schedules",
        "responses": {"200": _json(_ref("ScheduleList")), **_ERRORS}}},
    "/api/v1/schedules/{name}": {"get": {
        "summary": "a schedule, its recent slots (missed ones too) with their jobs, its audit trail",
        "operationId": "schedule", "parameters": [_NAME, _limit(20)],
        "responses": {"200": _json(_ref("ScheduleDetail")), **_ERRORS, "404": _error("no such schedule")}}},
    **{f"/api/v1/schedules/{{name}}/{c}": _schedule_command(c) for c in SCHEDULE_ACTIONS},
}


def _object(properties: dict[str, Any], required: list[str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties) if required is None
            else required, **extra}


_WORKFLOW = {"workflow_id": {"type": "string"}, "name": {"type": "string"}, "status": {"type": "string"},
             "hold": _N_STR, "run": {"type": "integer"}, "owner": _N_STR, "created_by": _N_STR,
             "created_at": {"type": "number"}, "updated_at": {"type": "number"}, "finished_at": _N_NUM,
             "checked_at": {"type": "number"}, "nodes": _N_INT}
_NODE = {"workflow_id": {"type": "string"}, "node": {"type": "string"}, "position": {"type": "integer"},
         "actor": {"type": "string"}, "queue": {"type": "string"}, "owner": _N_STR,
         "state": {"type": "string", "description": "the node's state in this run (SUCCEEDED, FAILED, "
                                                    "UPSTREAM_FAILED, WAITING...)"},
         "parents": {"type": "array", "items": {"type": "string"}},
         "job_id": _N_STR, "job_status": _N_STR, "attempt": _N_INT, "run": {"type": "integer"},
         "finished_at": _N_NUM, "last_error_class": _N_STR, "last_error_type": _N_STR,
         "last_error_message": {**_N_STR, "description": f"the node job's last error {_MASKED}"},
         "message": {"description": f"the node's args, kwargs, options {_MASKED}"},
         "result": {"description": f"the node's stored result {_MASKED}"}, "result_note": _N_STR}
_BODY = {"reason": {"type": "string", "minLength": 1, "description": "why (recorded on the workflow and its jobs)"},
         "dry_run": {"type": "boolean", "default": False, "description": "the plan only: nothing changes"}}

FLOW_SCHEMAS: dict[str, Any] = {
    "Workflow": _object(_WORKFLOW, ["workflow_id", "name", "status", "run"], additionalProperties=True),
    "WorkflowList": _object({"workflows": {"type": "array", "items": _ref("Workflow")}}),
    "WorkflowNode": _object(_NODE, ["node", "actor", "queue", "state", "parents"], additionalProperties=True),
    "WorkflowDetail": _object({
        "workflow": _ref("Workflow"), "masked": {"type": "boolean"},
        "nodes": {"type": "array", "items": _ref("WorkflowNode")},
        "edges": {"type": "array", "items": {"type": "array", "items": {"type": "string"}},
                  "description": "[parent, child] pairs"},
        "events": {"type": "array", "items": _OPEN}}),
    "WorkflowCommandRequest": _object(_BODY, ["reason"], additionalProperties=False),
    "WorkflowRerunRequest": _object({**_BODY, "allow_duplicate_side_effects": {
        "type": "boolean", "default": False,
        "description": "run non-idempotent nodes that ran again although their side effect may repeat"}},
        ["reason"], additionalProperties=False),
    "WorkflowCommandResult": _object({
        "command": {"type": "string"}, "workflow_id": {"type": "string"},
        "outcome": {"type": "string", "enum": ["done", "dry_run", "refused"]}, "message": {"type": "string"},
        "status": _N_STR, "plan": {"type": ["object", "null"], "description": "keep, resume, rerun, changed"},
        "jobs": {"type": "array", "items": _OPEN}}),
    "Schedule": _object({
        "name": {"type": "string"}, "timing": {"type": "string"}, "actor": {"type": "string"},
        "queue": {"type": "string"}, "owner": _N_STR, "paused": {"type": "boolean"}, "misfire": {"type": "string"},
        "next_slot": _N_NUM, "last_slot": _N_NUM, "decided_until": {"type": "number"},
        "definition": {**_OPEN, "description": f"the declaration, with its job's args and kwargs {_MASKED}"},
        "created_at": {"type": "number"}, "updated_at": {"type": "number"}, "slots_fired": {"type": "integer"}},
        ["name", "timing", "actor", "queue", "paused"]),
    "ScheduleList": _object({"schedules": {"type": "array", "items": _ref("Schedule")}}),
    "ScheduleDetail": _object({
        "schedule": _ref("Schedule"),
        "slots": {"type": "array", "items": _object({
            "schedule": {"type": "string"}, "slot_at": {"type": "number"}, "job_id": {"type": "string"},
            "kind": {"type": "string", "description": "on_time, missed (fired late by the misfire policy) or "
                                                      "trigger"},
            "fired_at": {"type": "number"}, "status": _N_STR})},
        "events": {"type": "array", "items": _OPEN}}),
    "ScheduleRequest": _object({"reason": {"type": "string", "minLength": 1}}, ["reason"], additionalProperties=False),
    "ScheduleCommandResult": _object({
        "command": {"type": "string"}, "schedule": {"type": "string"},
        "outcome": {"type": "string", "enum": ["done", "unchanged", "refused"]}, "message": {"type": "string"},
        "operator": {"type": "string"}, "job_id": _N_STR, "published": {"type": ["boolean", "null"]},
        "paused": {"type": ["boolean", "null"]}, "next_slot": _N_NUM}),
}
