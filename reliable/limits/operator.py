"""An operator's change of an actor's concurrency limit: a ceiling kept in the store, honoured by
every worker's next slot.

`set_concurrency(actor, n)` caps the actor's concurrency at `n` (1 to its declared concurrency: the
slots exist up to that), moving its effective concurrency to `n` at once; `n=None` clears the cap
(back to the declared one). The adaptive limits (reliable.limits.adaptive) go on below the cap: a
rate-limited actor is still halved, and restored at most to the cap. A lower limit takes effect as
running jobs finish (none is interrupted). Every change is audited in `reliable_limit_events`
(who, when, from where, why, before and after), and so is one the operators policy refuses
(`command_refused`): it is checked as the policy's `pause` on the actor's queue
(`commands.LIMIT_COMMANDS`). Every change needs a reason.
"""

from __future__ import annotations

from ..commands import LIMIT_COMMANDS, check_reason_text, require_reason
from ..errors import ConfigError, NotAuthorized, ReliableError
from ..inputs import MAX_NAME, escape_controls, text_problem
from ..operators import Operator, OperatorsPolicy
from ..store import StoreCore
from ..store.limit_settings import LimitView, actor_queues, add_event, get_limit, set_ceiling

__all__ = ["LimitNotFound", "allowed", "set_concurrency"]

_COMMAND = "limits set"


class LimitNotFound(ReliableError):
    """The actor has no concurrency limit in the store (none declared, or no worker ran it yet): HTTP 404."""


def _queues(store: StoreCore, actor: str) -> tuple[str, ...]:
    """The queues a change of `actor`'s limit is judged on: every home queue of its jobs ("*", every
    queue, before it has any): a limit is the actor's, wherever its jobs wait."""
    return actor_queues(store, actor) or ("*",)


def allowed(store: StoreCore, policy: OperatorsPolicy, name: str, actor: str, queue: str | None = None) -> bool:
    """Whether `name` may change `actor`'s limit (for forms; `set_concurrency` decides)."""
    return all(policy.allows(name, LIMIT_COMMANDS[_COMMAND], each, None)
               for each in ((queue,) if queue else _queues(store, actor)))


def _check_actor(actor: str) -> None:
    problem = ("it is empty" if not actor else f"it is longer than {MAX_NAME} characters" if len(actor) > MAX_NAME
               else text_problem(actor))
    if problem is not None:
        raise ConfigError(f"field 'actor': {problem}")


def set_concurrency(store: StoreCore, actor: str, concurrency: int | None, *, reason: str | None,
                    identity: Operator, operators: OperatorsPolicy | None = None) -> tuple[LimitView, LimitView]:
    """Cap `actor`'s concurrency at `concurrency` (None: clear the cap) as `identity`, audited; the limit
    before and after. ConfigError naming the field for a bad value, LimitNotFound without a limit row,
    NotAuthorized (audited) unless the operators policy allows `pause` on the actor's queue."""
    _check_actor(actor)
    require_reason(_COMMAND, reason)
    assert reason is not None
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)):
        raise ConfigError(f"field 'concurrency': expected an integer or null, not {concurrency!r}")
    current = get_limit(store, actor)
    policy = operators or OperatorsPolicy.allow_all()
    try:
        check_reason_text(_COMMAND, reason)
        if current is None:
            raise LimitNotFound(f"actor {actor!r} has no concurrency limit in the store (declare limits= on it; "
                                "its row is written when a worker first runs it)")
        if concurrency is not None and not 1 <= concurrency <= current.declared:
            raise ConfigError(f"field 'concurrency': must be from 1 to {current.declared} (the concurrency "
                              f"{actor!r} declares), not {concurrency}")
        for queue in _queues(store, actor):
            policy.check(identity.name, LIMIT_COMMANDS[_COMMAND], queue, None)
    except (NotAuthorized, ConfigError) as exc:
        if current is not None:
            add_event(store, actor, "command_refused", operator=identity.name, host=identity.host,
                      source=identity.source, reason=escape_controls(reason),
                      detail={"command": _COMMAND, "why": str(exc)})
        raise
    changed = set_ceiling(store, actor, concurrency, operator=identity.name, host=identity.host,
                          source=identity.source, reason=reason)
    if changed is None:  # deleted meanwhile
        raise LimitNotFound(f"actor {actor!r} has no concurrency limit in the store")
    return changed
