"""The messages Dramatiq's composition features send after an attempt, built before its outcome commits.

Dramatiq's Pipelines (the next step), Callbacks (`on_success`, `on_failure`) and Retries
(`on_retry_exhausted`) send these from their after_process_message hooks, which run after
reliable's hook has committed the job's outcome: a worker killed between the two loses the
continuation, and the redelivered message's claim is refused (the job is finished). For tracked
actors reliable builds the same messages first, registers them in the transaction that commits
the outcome (`StateStore.finish(follow_ups=...)`) and publishes them after it; those Dramatiq
middleware act for untracked actors only (`reliable.install`).

Only kinds whose Dramatiq middleware is on the broker are built, as in plain Dramatiq. Pure apart
from reading actors off the broker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import dramatiq
from dramatiq.middleware import Callbacks, Pipelines, Retries

from ..states import JobStatus

__all__ = ["KINDS", "FollowUp", "follow_ups", "follows_success", "kind_of"]

#: The Dramatiq middleware whose continuations reliable takes over, by the kind they send.
KINDS: dict[type[dramatiq.Middleware], str] = {
    Pipelines: "pipelines", Callbacks: "callbacks", Retries: "on_retry_exhausted",
}

logger = logging.getLogger("reliable.continuations")  # its name before the move to worker/

_SUCCEEDED = frozenset({JobStatus.SUCCEEDED})
_DEAD = frozenset({JobStatus.DEAD})


def kind_of(middleware: dramatiq.Middleware) -> str | None:
    """The continuation kind a Dramatiq middleware sends, or None."""
    for cls, kind in KINDS.items():
        if isinstance(middleware, cls):
            return kind
    return None


@dataclass(frozen=True)
class FollowUp:
    """A message to send when the attempt ends in one of `statuses` (None: whatever it ends in)."""

    message: dramatiq.Message[Any]
    delay: int | None
    statuses: frozenset[JobStatus] | None

    def applies(self, status: JobStatus) -> bool:
        """Whether this follows an attempt that left its job in `status`."""
        return self.statuses is None or status in self.statuses


#: The options that make a message send something after its success (the next pipeline step,
#: Callbacks' on_success): `follow_ups` builds from them, `follows_success` tells whether any is set.
_SUCCESS_OPTIONS = ("pipe_target", "on_success")
_PIPE_TARGET, _ON_SUCCESS = _SUCCESS_OPTIONS


def follows_success(message: Any, actor_options: Mapping[str, Any]) -> bool:
    """Whether a success of `message` sends a message that `follow_ups` would build (whichever
    Dramatiq middleware are on the broker): such a success must be registered with its continuation."""
    options = message.options  # read out, not in a generator: the fast path asks it of every delivery
    return (options.get(_PIPE_TARGET) is not None or options.get(_ON_SUCCESS) is not None
            or bool(actor_options.get(_PIPE_TARGET)) or bool(actor_options.get(_ON_SUCCESS)))


def follow_ups(broker: dramatiq.Broker, message: Any, *, kinds: frozenset[str], result: Any = None,
               exception: BaseException | None = None,
               exhausted: Mapping[str, Any] | None = None) -> list[FollowUp]:
    """What Dramatiq would send after this attempt of `message`, as it would build it.

    `exhausted` (Dramatiq's `{"retries": ..., "max_retries": ...}`) is given when the failure used
    up the job's retries: `on_retry_exhausted` then follows if the job ends DEAD. Each message is
    built on its own, as Dramatiq's separate middleware would: one that cannot be built (an
    `on_success` naming no actor, say) is logged and left out, and never costs the others.
    """
    actor_options = broker.get_actor(message.actor_name).options

    def option(name: str) -> Any:
        return message.options.get(name) or actor_options.get(name)

    def next_step(target: Mapping[str, Any]) -> FollowUp:
        step: dramatiq.Message[Any] = dramatiq.Message(**target)
        if not (step.options.get("pipe_ignore") or actor_options.get("pipe_ignore")):
            step = step.copy(args=(*step.args, result))
        return FollowUp(step, step.options.get("delay"), _SUCCEEDED)

    builders: list[tuple[str, Callable[[], FollowUp]]] = []
    if exception is None:
        target = message.options.get(_PIPE_TARGET)
        if "pipelines" in kinds and target is not None:
            builders.append(("the next pipeline step", lambda: next_step(target)))
        if "callbacks" in kinds and (name := option(_ON_SUCCESS)):
            builders.append((f"on_success {name!r}", lambda: FollowUp(
                _message(broker, name, message.asdict(), result), None, _SUCCEEDED)))
    else:
        if "callbacks" in kinds and (failed := option("on_failure")):
            failure = {"type": type(exception).__name__, "message": str(exception)}
            builders.append((f"on_failure {failed!r}", lambda: FollowUp(
                _message(broker, failed, message.asdict(), failure), None, None)))
        if "on_retry_exhausted" in kinds and exhausted is not None and (gave_up := option("on_retry_exhausted")):
            builders.append((f"on_retry_exhausted {gave_up!r}", lambda: FollowUp(
                _message(broker, gave_up, message.asdict(), dict(exhausted)), None, _DEAD)))
    found: list[FollowUp] = []
    for what, build in builders:
        try:
            found.append(build())
        except Exception:
            logger.exception("message %s: %s cannot be built; it is not sent", message.message_id, what)
    return found


def _message(broker: dramatiq.Broker, actor_name: str, *args: Any) -> dramatiq.Message[Any]:
    message: dramatiq.Message[Any] = broker.get_actor(actor_name).message(*args)
    return message
