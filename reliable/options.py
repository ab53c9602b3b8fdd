"""The actor options reliable reads, listed once: which exist, which shape a job's contract, and
which a message may never carry.

A job's contract (may it be retried after a crash? resumed? which actor compensates it? which
function validates a resume?) is decided by the code that declares the actor and by the policy,
never by whoever publishes a message: a producer that could set ``resumable`` or
``resume_validator="some.module:function"`` in a message's options would choose code that
operators' tools import and run. So these options are read from the actor's declaration only,
and a message that carries them has them removed at registration (and the fact recorded).

The options that choose what a delivery does (DELIVERY_OPTIONS, Dramatiq's and reliable's) each
have one rule of type and range (`OPTION_RULES`); `option_problem` applies them, for `send()`
(registration refuses the message: MessageRefused naming the option) and for every delivery (a
foreign message that breaks them is dead-lettered; the job's own message ends the job DEAD:
reliable.worker.delivery). Pure: no I/O, imports nothing of ours.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

from .inputs import MAX_NAME

__all__ = [
    "ACTOR_OPTIONS",
    "CODE_OPTIONS",
    "CODE_VERSION",
    "CONTRACT_OPTIONS",
    "DELIVERY_OPTIONS",
    "LIMITS",
    "MAX_OPTION_COUNT",
    "MAX_OPTION_MILLIS",
    "OPTION_RULES",
    "OWN_QUEUE",
    "RETRY_OPTIONS",
    "SEND_TIMEOUT",
    "STORED_CONTRACT",
    "UNOWNED",
    "UNTRUSTED_IN_MESSAGE",
    "contract_options",
    "declared_contract",
    "option_problem",
    "own_queue",
    "stored_contract",
    "strip_untrusted",
]

#: reliable's own actor options that shape the job contract or name code (see JobContract).
CONTRACT_OPTIONS: tuple[str, ...] = (
    "owner", "idempotent", "resumable", "checkpoint_schema", "stop_grace", "max_attempts", "compensation",
    "retry_on_crash", "resume_validator", "fast_path",
)

#: Dramatiq's Retries options the policy also reads (declared by Retries, message-first in Dramatiq).
RETRY_OPTIONS: tuple[str, ...] = ("max_retries", "min_backoff", "max_backoff")

#: The message option under which reliable's middleware stores the contract declared on the actor,
#: so a recovery loop or CLI that does not import the actor still decides with it.
STORED_CONTRACT = "reliable_contract"

#: The `owner` label of a job (an alert, the actor-owner info series) whose actor declares no owner.
UNOWNED = "unowned"

#: The message option naming the job's own queue on a message published on another queue (a routed
#: retry's lane): set by `reliable.dispatch.message_for` only (a producer's is removed, see below).
OWN_QUEUE = "reliable_own_queue"

#: A producer's message option for one send: how long it waits for a store it cannot reach (seconds;
#: install's send_timeout otherwise). Removed at registration: never stored, published or delivered.
SEND_TIMEOUT = "send_timeout"

#: Options that hold code, used where the actor runs (never stored with a job).
CODE_OPTIONS: tuple[str, ...] = ("checkpoint_codec",)

#: The version of an actor's code, declared on it (`code_version="2"`): a workflow's resume
#: recomputes a succeeded node whose actor's declared version changed (reliable.workflows).
CODE_VERSION = "code_version"

#: Concurrency and rate limits held across workers (`limits=reliable.Limits(...)`: reliable.limits);
#: read from the actor's declaration only, never from a message.
LIMITS = "limits"

#: The options reliable's middleware declares, so that `@dramatiq.actor(...)` accepts them.
ACTOR_OPTIONS: frozenset[str] = frozenset({"reliable", "workflow_id", CODE_VERSION, LIMITS, *CONTRACT_OPTIONS,
                                           *CODE_OPTIONS})

#: Options a message may not set: everything that shapes the contract or names code, whether
#: reliable tracks the actor, and a forged stored contract. (workflow_id, trace_id and
#: parent_job_id only link jobs; Dramatiq's retry options are Dramatiq's own.)
UNTRUSTED_IN_MESSAGE: frozenset[str] = frozenset({"reliable", STORED_CONTRACT, OWN_QUEUE, *CONTRACT_OPTIONS,
                                                   *CODE_OPTIONS})

#: The message options that choose what a delivery of a job runs, under which limits, and what
#: follows it: with the actor name, the arguments and the keyword arguments, they make the job's
#: delivery digest (reliable.delivery_digest), stored at registration and compared at every claim.
#: Options left out change from one delivery of the same job to the next, or only link and
#: annotate it: Dramatiq's `eta`, `retries`, `traceback`, `requeue_timestamp`, `redelivered`,
#: `redis_message_id`, `broker_priority` and a pipeline step's `delay`; the trace context
#: (`traceparent`, `trace_id`) and `parent_job_id`; `workflow_id` (the store keeps it on the job
#: row, and registration adds it, also to a pipeline's later steps); reliable's own markers
#: (`reliable_registered`, STORED_CONTRACT, OWN_QUEUE, a limits deferral count); and the options a
#: message may not set (UNTRUSTED_IN_MESSAGE: removed at registration, never read from a delivery).
DELIVERY_OPTIONS: tuple[str, ...] = (
    # Dramatiq's Retries: the retry budget and its backoff (RETRY_OPTIONS), exceptions that are
    # not retried, the actor told when retries run out
    *RETRY_OPTIONS, "throws", "on_retry_exhausted",
    # Callbacks and Pipelines: what follows the run
    "on_success", "on_failure", "pipe_target", "pipe_ignore",
    # GroupCallbacks: the barrier the run arrives at and the callbacks it may release
    "group_completion_uuid", "group_completion_callbacks",
    # reliable's workflows: the node whose result the run stores and whose workflow it advances
    "workflow_node",
    # TimeLimit, AgeLimit, ShutdownNotifications, Results
    "time_limit", "max_age", "notify_shutdown", "store_results", "result_ttl",
)

_CONTRACT_KEYS = (*CONTRACT_OPTIONS, *RETRY_OPTIONS)

#: The largest retry count a message may ask for (max attempts must fit the store's 32-bit counter).
MAX_OPTION_COUNT = 2**31 - 2
#: The longest duration a message's option may name, in milliseconds (365 days): backoffs, time and
#: age limits, result lifetimes.
MAX_OPTION_MILLIS = 365 * 24 * 3600 * 1000

_Rule = Callable[[Any], "str | None"]


def _kind(value: Any) -> str:
    return f"{type(value).__name__} {value!r}"[:120]


def _count(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return f"expected an integer from 0 to {MAX_OPTION_COUNT}, got {_kind(value)}"
    return None if 0 <= value <= MAX_OPTION_COUNT else f"expected an integer from 0 to {MAX_OPTION_COUNT}, got {value}"


def _millis(value: Any) -> str | None:
    expected = f"expected milliseconds, a number from 0 to {MAX_OPTION_MILLIS}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{expected}, got {_kind(value)}"
    if not math.isfinite(value) or not 0 <= value <= MAX_OPTION_MILLIS:
        return f"{expected}, got {value!r}"
    return None


def _flag(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"expected true or false, got {_kind(value)}"


def _name(value: Any) -> str | None:
    if isinstance(value, str) and 0 < len(value) <= MAX_NAME:
        return None
    return f"expected a name (a string of 1 to {MAX_NAME} characters), got {_kind(value)}"


def _mapping(value: Any) -> str | None:
    return None if isinstance(value, Mapping) else f"expected a message (a mapping), got {_kind(value)}"


def _mappings(value: Any) -> str | None:
    if isinstance(value, list | tuple) and all(isinstance(each, Mapping) for each in value):
        return None
    return f"expected a list of messages (mappings), got {_kind(value)}"


def _exceptions(value: Any) -> str | None:
    classes = value if isinstance(value, tuple) else (value,)
    if all(isinstance(each, type) and issubclass(each, BaseException) for each in classes):
        return None
    return f"expected an exception class or a tuple of them, got {_kind(value)}"


#: The rule of each option of DELIVERY_OPTIONS (None, an option left unset, always passes): what
#: Dramatiq's middleware and reliable's policy read the option as.
OPTION_RULES: Mapping[str, _Rule] = {
    "max_retries": _count, "min_backoff": _millis, "max_backoff": _millis, "throws": _exceptions,
    "on_retry_exhausted": _name, "on_success": _name, "on_failure": _name, "pipe_target": _mapping,
    "pipe_ignore": _flag, "group_completion_uuid": _name, "group_completion_callbacks": _mappings,
    "workflow_node": _name, "time_limit": _millis, "max_age": _millis, "notify_shutdown": _flag,
    "store_results": _flag, "result_ttl": _millis,
}
assert set(OPTION_RULES) == set(DELIVERY_OPTIONS), "every behaviour-choosing option needs its rule"


def option_problem(options: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first option of `options` that breaks its rule (`OPTION_RULES`) and what is wrong with
    it, in words for an error message; None: every one it sets is fine."""
    for key, value in options.items():  # a message sets a few options: fewer lookups than the rules
        rule = OPTION_RULES.get(key)
        if rule is not None and value is not None and (problem := rule(value)) is not None:
            return key, problem
    return None


def declared_contract(actor_options: Mapping[str, Any]) -> dict[str, Any]:
    """The contract options an actor declares (what is stored with each of its jobs)."""
    return {key: actor_options[key] for key in _CONTRACT_KEYS if key in actor_options}


def contract_options(actor_options: Mapping[str, Any], message_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The options a job's contract is computed from: the actor's, then the Dramatiq retry options
    (max_retries, min_backoff, max_backoff) a message may set, which win as they do in Dramatiq."""
    merged = dict(actor_options)
    for key in RETRY_OPTIONS:
        if message_options and message_options.get(key) is not None:
            merged[key] = message_options[key]
    return merged


def stored_contract(message: Mapping[str, Any] | None) -> dict[str, Any]:
    """The contract stored with a job's message at registration (contract keys only; {} if none)."""
    options = (message or {}).get("options") or {}
    stored = options.get(STORED_CONTRACT) if isinstance(options, Mapping) else None
    return declared_contract(stored) if isinstance(stored, Mapping) else {}


def own_queue(queue_name: str, options: Mapping[str, Any] | None) -> str:
    """The job's own queue, from a message's `queue_name` and `options`: the one rule for which
    queue's contract, policy rules and operators' rights apply (docs/policies.md, "Retry routing").

    A message on a routed retry's lane names its own queue in `OWN_QUEUE`; any other message is
    on its own queue (Dramatiq's delay queue `<queue>.DQ` counts as `<queue>`). `Job.home_queue`
    applies it to the message stored with the job.
    """
    named = options.get(OWN_QUEUE) if options else None
    return str(named) if named else queue_name.removesuffix(".DQ")


def strip_untrusted(options: MutableMapping[str, Any]) -> tuple[str, ...]:
    """Remove the options a message may not set from `options` (in place); their names, sorted."""
    found = sorted(key for key in options if key in UNTRUSTED_IN_MESSAGE)
    for key in found:
        del options[key]
    return tuple(found)
