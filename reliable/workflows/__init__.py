"""Workflows: a DAG of jobs that resumes only what failed (see docs/workflows.md).

Declared with `reliable.workflow(name, [reliable.node(...), ...])`, persisted at submission, advanced
by the workers that commit their nodes' outcomes (and by the recovery loop), operated with
`reliable workflow ...` or `WorkflowEngine`.
"""

from __future__ import annotations

from .definition import Node, Workflow, WorkflowDefinitionError, node, workflow
from .planning import ResumePlan, WorkflowStatus

__all__ = ["Node", "ResumePlan", "Workflow", "WorkflowDefinitionError", "WorkflowStatus", "node", "workflow"]
