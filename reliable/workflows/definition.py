"""A workflow as declared in Python: a DAG of actor calls (nodes) and their dependencies.

    wf = reliable.workflow("nightly", [
        reliable.node("extract", extract.message("2026-12-03")),
        reliable.node("clean", clean, after=["extract"], pass_results=True),
        reliable.node("report", report, after=["clean"], trigger="all_done"),
    ])
    workflow_id = wf.submit()

Checked here, before anything is stored: at most `MAX_NODES` nodes, node names are unique,
dependencies name declared nodes, the graph has no cycle, arguments are JSON. Dramatiq's `pipeline`
and `group` map onto workflows (`from_pipeline`, `from_group`). Pure: no I/O (`submit` hands the
workflow to reliable.workflows.engine).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..inputs import MAX_NAME
from .graph import WorkflowDefinitionError, descendants, input_digest, topological

__all__ = [
    "MAX_NODES",
    "ON_UPSTREAM_FAILURE",
    "TRIGGERS",
    "Node",
    "Workflow",
    "WorkflowDefinitionError",
    "descendants",
    "input_digest",
    "node",
    "topological",
    "workflow",
]

#: When a node may start: all parents succeeded (default), or all parents finished, whatever
#: their outcome (a fan-in that reports on failures; it sees each parent's outcome).
TRIGGERS: tuple[str, ...] = ("all_succeeded", "all_done")

#: What a node that waits for all parents to succeed becomes when one failed for good: it fails
#: (UPSTREAM_FAILED, the default) or is skipped (SKIPPED). Either way it does not run and the
#: workflow ends FAILED.
ON_UPSTREAM_FAILURE: tuple[str, ...] = ("fail", "skip")

#: Message options a node may not carry over: Dramatiq's links between messages (a workflow's
#: edges replace them) and reliable's own links (set by the engine).
_LINK_OPTIONS = frozenset({"pipe_target", "pipe_ignore", "on_success", "on_failure", "group_completion_uuid",
                           "group_completion_callbacks", "workflow_id", "workflow_node", "parent_job_id"})

#: The most nodes a workflow may declare: one is stored, drawn and advanced in one transaction, so
#: a bigger one is better split into workflows that start each other (docs/workflows.md).
MAX_NODES = 10_000


@dataclass(frozen=True)
class Node:
    """One node: the actor call it makes, the nodes it waits for, and how it reacts to them."""

    name: str
    actor: str
    queue: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)
    after: tuple[str, ...] = ()
    trigger: str = "all_succeeded"
    on_upstream_failure: str = "fail"
    pass_results: bool = False  # the parents' results are appended to args, in `after` order


def node(name: str, target: Any, *, after: Iterable[str] = (), trigger: str = "all_succeeded",
         on_upstream_failure: str = "fail", pass_results: bool = False) -> Node:
    """Declare a node calling `target`: a Dramatiq actor (called without arguments) or a message
    (`actor.message(*args, **kwargs)` or `actor.message_with_options(...)`)."""
    message = target.message() if hasattr(target, "send") else target  # an Actor, else a Message
    for attribute in ("actor_name", "queue_name", "args", "kwargs", "options"):
        if not hasattr(message, attribute):
            raise WorkflowDefinitionError(f"node {name!r}: expected a Dramatiq actor or message, got {target!r}")
    options = {key: value for key, value in dict(message.options).items() if key not in _LINK_OPTIONS}
    return Node(name=name, actor=message.actor_name, queue=message.queue_name, args=tuple(message.args),
                kwargs=dict(message.kwargs), options=options, after=tuple(after), trigger=trigger,
                on_upstream_failure=on_upstream_failure, pass_results=pass_results)


@dataclass(frozen=True)
class Workflow:
    """A validated DAG of nodes, in declaration order."""

    name: str
    nodes: tuple[Node, ...]

    def __post_init__(self) -> None:
        _validate(self.name, self.nodes)

    def __getitem__(self, name: str) -> Node:
        for each in self.nodes:
            if each.name == name:
                return each
        raise KeyError(name)

    @property
    def edges(self) -> list[tuple[str, str, int]]:
        """(parent, child, the parent's place in the child's `after`)."""
        return [(parent, each.name, index) for each in self.nodes for index, parent in enumerate(each.after)]

    def submit(self, broker: Any = None, *, workflow_id: str | None = None, operator: str | None = None) -> str:
        """Persist the workflow (one transaction) and start its roots; its id.

        `broker`: the Dramatiq broker reliable is installed on (default: the global broker).
        """
        from .engine import submit

        return submit(self, broker=broker, workflow_id=workflow_id, operator=operator)

    @classmethod
    def from_pipeline(cls, name: str, pipeline: Any) -> Workflow:
        """A Dramatiq `pipeline` as a chain of nodes `step1`, `step2`...: each step after the first
        receives the previous step's result as its last argument, unless its message was created
        with `pipe_ignore=True` (as Dramatiq does)."""
        nodes = []
        for index, message in enumerate(pipeline.messages, start=1):
            first = index == 1
            nodes.append(node(f"step{index}", message, after=() if first else (f"step{index - 1}",),
                              pass_results=not first and not message.options.get("pipe_ignore")))
        return cls(name, tuple(nodes))

    @classmethod
    def from_group(cls, name: str, group: Any) -> Workflow:
        """A Dramatiq `group` as parallel nodes `member1`...; a member that is a pipeline becomes a
        chain `member2.step1`...; each completion callback becomes a node `callback1`... after every
        member's last node."""
        nodes: list[Node] = []
        ends: list[str] = []
        for index, child in enumerate(group.children, start=1):
            prefix = f"member{index}"
            if hasattr(child, "messages"):
                chain = cls.from_pipeline(name, child).nodes
                nodes.extend(Node(**{**each.__dict__, "name": f"{prefix}.{each.name}",
                                     "after": tuple(f"{prefix}.{a}" for a in each.after)}) for each in chain)
                ends.append(f"{prefix}.{chain[-1].name}")
            else:
                nodes.append(node(prefix, child))
                ends.append(prefix)
        for index, data in enumerate(getattr(group, "completion_callbacks", ()), start=1):
            callback = _MessageData(**{key: data[key] for key in ("actor_name", "queue_name", "args", "kwargs")},
                                    options=dict(data.get("options") or {}))
            nodes.append(node(f"callback{index}", callback, after=ends))
        return cls(name, tuple(nodes))


@dataclass(frozen=True)
class _MessageData:
    actor_name: str
    queue_name: str
    args: Sequence[Any]
    kwargs: Mapping[str, Any]
    options: Mapping[str, Any]


def workflow(name: str, nodes: Iterable[Node]) -> Workflow:
    """Declare a workflow named `name` from `nodes` (see `node`)."""
    return Workflow(name, tuple(nodes))


def _validate(name: str, nodes: Sequence[Node]) -> None:
    if not name or len(name) > MAX_NAME:
        raise WorkflowDefinitionError(f"workflow name must be 1 to {MAX_NAME} characters, got {name!r}")
    if not nodes:
        raise WorkflowDefinitionError(f"workflow {name!r} has no nodes")
    if len(nodes) > MAX_NODES:
        raise WorkflowDefinitionError(f"workflow {name!r} has {len(nodes)} nodes, more than the limit of "
                                      f"{MAX_NODES} (MAX_NODES): split it into workflows")
    seen: set[str] = set()
    for each in nodes:
        where = f"workflow {name!r}, node {each.name!r}"
        if not isinstance(each.name, str) or not each.name or len(each.name) > MAX_NAME:
            raise WorkflowDefinitionError(f"workflow {name!r}: node name must be 1 to {MAX_NAME} characters, "
                                          f"got {each.name!r}")
        if each.name in seen:
            raise WorkflowDefinitionError(f"{where}: declared twice")
        seen.add(each.name)
        if each.trigger not in TRIGGERS:
            raise WorkflowDefinitionError(f"{where}: trigger must be one of {', '.join(TRIGGERS)}, "
                                          f"got {each.trigger!r}")
        if each.on_upstream_failure not in ON_UPSTREAM_FAILURE:
            raise WorkflowDefinitionError(f"{where}: on_upstream_failure must be one of "
                                          f"{', '.join(ON_UPSTREAM_FAILURE)}, got {each.on_upstream_failure!r}")
        if each.pass_results and not each.after:
            raise WorkflowDefinitionError(f"{where}: pass_results needs parents (after=...)")
        if len(set(each.after)) != len(each.after):
            raise WorkflowDefinitionError(f"{where}: a parent is listed twice in after={list(each.after)}")
        try:
            json.dumps({"args": list(each.args), "kwargs": dict(each.kwargs), "options": dict(each.options)})
        except (TypeError, ValueError) as exc:
            raise WorkflowDefinitionError(f"{where}: arguments and options must be JSON ({exc})") from None
    for each in nodes:
        unknown = [parent for parent in each.after if parent not in seen]
        if unknown:
            raise WorkflowDefinitionError(f"workflow {name!r}, node {each.name!r}: after= names unknown "
                                          f"node(s) {', '.join(map(repr, unknown))}")
    topological({each.name: each.after for each in nodes})
