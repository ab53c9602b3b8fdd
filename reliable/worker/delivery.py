"""A delivery must match its job: the worker's half of the check (reliable.delivery_digest).

Any producer can publish a message with an existing job's id. The claim (the durable claim, the
fast path's look, a limited actor's look) therefore carries the digest of what was delivered, and
the store refuses it with the reason "delivery_mismatch" when the job was registered with
another one. Such a delivery is not the job's message and never runs:

- a `delivery_mismatch` event on the job says what arrived: actor, digest, how many arguments and
  keyword arguments, the option names, the parts that differ from the job's message, never a
  value (arguments may hold secrets); `reliable_delivery_mismatches_total` counts it (metrics.py);
- a warning names the job, the delivered actor and what differs;
- the message is failed, so Dramatiq nacks it to the queue's dead letters (RabbitMQ's `<queue>.XQ`,
  StubBroker's `dead_letters`), and skipped (SkipMessage, no result stored);
- the job is left as it was: its own message still runs when it comes.

A delivery whose fields are not a message's (options or keyword arguments that are not a mapping,
a message id that is no job id: reliable.inputs; an option that chooses behaviour and breaks its
rule: reliable.options), or one that cannot become a job (too large: `MessageRefused` at its
registration), is refused the same way, whatever the store holds. When it is the job's own message
(its digest is the one the job was registered with) and the job waits for it, it can never run:
the job ends DEAD with an `unrunnable` event instead (`end_unrunnable`), not left PENDING for the
sweeper to publish again and again. So is:

- a delivery whose body names another queue than its actor's declaration and than the queues the
  store records for its job (`queue_problem`): the queue chooses the contract (idempotent or not,
  retries, operators' rights), so it is read from the declaration or the store, never from the
  body. Dramatiq's delay queue counts as its queue (`delivered_queue`); a routed retry arrives on
  the lane the store says the job waits on (or on one of the policy's lanes, its job sent home
  meanwhile): the claim then takes the contract of the job's own queue from the store. A body
  naming another queue than the one it was consumed from (reliable.consumed) is refused
  too, and dead-lettered on the queue it came from.
- a delivery of a job the store does not know that claims membership of a group whose barrier the
  store holds (reliable.worker.groups.forged_member): it would count as a member and release the
  group's callbacks early.

When the store holds no job for the refused id, the event goes to the store's listeners only (the
JSON event log, the metric): an event row belongs to a job (`StateStore.announce`); its job id is
cut to 200 characters, as in every log line here.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Collection, Mapping
from typing import Any, NoReturn

import dramatiq
from dramatiq.middleware import SkipMessage

from ..compat.dramatiq_internals import message_fields
from ..consumed import consumed_from, restore
from ..delivery_digest import delivery_digest, differences
from ..errors import ClaimRefused, TransitionRefused
from ..inputs import clip, job_id_problem
from ..options import option_problem
from ..states import Event, JobStatus
from ..store import Job, StateStore

__all__ = ["MISMATCH", "UNRUNNABLE", "checked_digest", "delivered_digest", "delivered_queue", "digest_of",
           "end_unrunnable", "fields", "is_registered_message", "malformed", "queue_problem", "refuse"]

logger = logging.getLogger("reliable.worker.delivery")

#: The claim refusal's reason (ClaimRefused.reason) and the event's name.
MISMATCH = "delivery_mismatch"
#: The skip reason of a delivery whose job it ended DEAD (`end_unrunnable`).
UNRUNNABLE = Event.UNRUNNABLE.value
#: Where a job waits for the delivery of its message (`end_unrunnable` ends it from there).
_WAITING = frozenset({JobStatus.PENDING, JobStatus.RETRY_WAIT})
#: Option names kept in the event: a forged message may carry any number of them.
_MAX_NAMES = 50
_MAX_NAME = 100


#: The decoded message of a delivery, to read its fields (`message` itself when it is no
#: MessageProxy): the proxy's Python-level __getattr__ costs a third of a microsecond per read, and
#: a claim reads a dozen of them (reliable.compat.dramatiq_internals, its version gate and fallback).
#: Never to be written through or kept: `restore` may replace it.
fields = message_fields


def malformed(message: Any) -> str | None:
    """What makes `message` no message of any job (None: its fields have a message's types and its
    id is a job id: reliable.inputs)."""
    if (problem := job_id_problem(message.message_id)) is not None:
        return f"its message id is refused: {problem}"
    for field, kind in (("args", (list, tuple)), ("kwargs", Mapping), ("options", Mapping)):
        if not isinstance(getattr(message, field), kind):
            return f"its {field} are a {type(getattr(message, field)).__name__}"
    if (bad := option_problem(message.options)) is not None:
        return f"its option {bad[0]} is refused: {bad[1]}"
    return None


def delivered_queue(message: Any) -> tuple[str, str | None]:
    """The queue a delivery's body names and the one it was consumed from (None: unknown, see
    `consumed`), Dramatiq's delay queue `<queue>.DQ` counted as `<queue>` when both name it alike.
    A body naming `<queue>.DQ` consumed from `<queue>` (or the reverse) keeps both names as they
    are, so that `queue_problem` refuses it: Dramatiq would acknowledge it on the consumer its body
    names (`Worker.consumers[message.queue_name]`), with a delivery tag of another channel."""
    named, came = str(fields(message).queue_name), consumed_from(message)
    if came is not None and came != named:
        return named, came
    return named.removesuffix(".DQ"), None if came is None else came.removesuffix(".DQ")


def queue_problem(delivered: str, consumed: str | None, declared: str, job: Job | None,
                  lanes: Collection[str]) -> str | None:
    """What makes a delivery naming queue `delivered`, consumed from `consumed`, no message of its
    job, for an actor declared on `declared`. None: it names the queue it came from, and that is the
    actor's queue; or, for a job the store holds, one the store records for it (the queue it waits
    on, its own) or one of the policy's retry `lanes` (a routed retry's message still on its lane
    after an operator sent the job home: the store decides its contract)."""
    if consumed is not None and consumed != delivered:
        return f"it names queue {delivered[:_MAX_NAME]!r} but came from queue {consumed!r}"
    if delivered == declared:
        return None
    if job is not None and (delivered in (job.queue, job.home_queue) or delivered in lanes):
        return None
    recorded = f" nor its job's ({job.queue!r})" if job is not None else ", and the store has no such job"
    return (f"its queue {delivered[:_MAX_NAME]!r} is not its actor's ({declared!r}){recorded}")


def delivered_digest(message: Any) -> str:
    """The digest of a delivery (a Dramatiq message or MessageProxy) whose fields are well formed."""
    # Dramatiq's own JSON encoder delivers values as json.loads gives them: hashed as they are.
    decoded = type(dramatiq.get_encoder()) is dramatiq.JSONEncoder
    return delivery_digest(message.actor_name, message.args, message.kwargs, message.options, decoded=decoded)


def checked_digest(message: Any) -> tuple[str, None] | tuple[None, str]:
    """(the delivery's digest, None), or (None, what makes it no message of its job): malformed,
    or values that cannot be hashed."""
    message = fields(message)
    problem = malformed(message)
    if problem is not None:
        return None, problem
    try:
        return delivered_digest(message), None
    except Exception as exc:  # values JSON cannot hold (a custom encoder's), nesting too deep
        return None, f"its arguments cannot be hashed ({type(exc).__name__})"


def digest_of(store: StateStore, message: Any, *, worker_id: str) -> str:
    """The delivery's digest, for its claim. A malformed delivery, or one whose values cannot be
    hashed, is refused here (`refuse`: raises SkipMessage)."""
    digest, problem = checked_digest(message)
    if digest is not None:
        return digest
    assert problem is not None
    end_unrunnable(store, message, problem, worker_id=worker_id)
    refuse(store, message, None, worker_id=worker_id, problem=problem)


def end_unrunnable(store: StateStore, message: Any, problem: str, *, worker_id: str) -> None:
    """End the job DEAD when `message`, which can never run (`problem`: an option that breaks its
    rule, a claim that fails the same way every time), is its own message and the job waits for it
    (PENDING, RETRY_WAIT: a compare-and-set on the version read); the delivery is then dead-lettered
    and skipped (raises SkipMessage). Returns when it is not the job's message, or the job is in
    another state or moved on: the caller refuses the delivery (`refuse`)."""
    job_id = message.message_id
    if job_id_problem(job_id) is not None:
        return
    job = store.find(job_id)
    if job is None or job.status not in _WAITING or not is_registered_message(job, message):
        return
    shown = clip(job_id)
    try:
        store.transition(job.job_id, Event.UNRUNNABLE, expected_version=job.version,
                         reason=f"its message can never run: {problem}",
                         detail={"actor": str(message.actor_name)[:_MAX_NAME], "worker_id": worker_id})
    except TransitionRefused as exc:
        logger.info("job %s: its message can never run (%s), but the job moved on meanwhile (%s)", shown, problem, exc)
        return
    logger.warning("job %s: its message can never run, dead-lettered and the job ended DEAD: %s", shown, problem)
    message.fail()  # nacked: the queue's dead letters keep it for whoever investigates
    if isinstance(message.options, dict):
        message.options["store_results"] = False  # never ran: Results must not store None for it
    raise SkipMessage(UNRUNNABLE)


def is_registered_message(job: Job, message: Any) -> bool:
    """Whether `message` carries what `job` was registered with: its digest is the job's (a job
    registered before digests existed has none, and any delivery counts, as the claim treats it)."""
    if job.delivery_digest is None:
        return True
    try:
        return delivered_digest(message) == job.delivery_digest
    except Exception:  # values that cannot be hashed: not the job's message
        return False


def refuse(store: StateStore, message: Any, refusal: ClaimRefused | None, *, worker_id: str,
           problem: str | None = None, differs: str | None = None) -> NoReturn:
    """Record, log, dead-letter and skip a delivery that is not its job's message: `refusal` from
    the store (a digest that differs), or `problem`, what else makes it no message of its job (see
    `malformed`, `queue_problem`), `differs` naming the part at fault."""
    job_id = message.message_id
    digest = None
    if problem is None:
        try:
            digest = delivered_digest(message)
        except Exception:
            digest = None
    arrived = _arrival(message, digest)
    job = None
    if job_id_problem(job_id) is None:
        try:
            job = store.find(job_id)
        except Exception:  # the record loses a detail; the delivery is refused all the same
            logger.warning("job %s: could not read it to say how the refused delivery differs", clip(job_id),
                           exc_info=True)
    if job is not None and problem is None:
        arrived["differs"] = differences(job.message, _as_dict(message))
    elif differs is not None:
        arrived["differs"] = [differs]
    why = problem or ("differs in " + ", ".join(arrived.get("differs") or ["its digest"]))
    shown = clip(job_id)
    logger.warning("message %s refused, not run and dead-lettered: it is not the message of job %s (actor %r, %s)",
                   shown, shown, arrived["actor"], why)
    reason = f"a delivery that is not this job's message was refused: {why}"
    try:
        if job is not None:
            store.record_event(job.job_id, MISMATCH, worker_id=worker_id, detail=arrived, reason=reason)
        else:  # no job to hold an event row: the event log and the metric have it
            store.announce(shown, MISMATCH, actor=arrived["actor"], queue=arrived["queue"],
                           worker_id=worker_id, detail=arrived, reason=reason)
    except Exception:
        logger.warning("job %s: could not record the refused delivery", shown, exc_info=True)
    restore(message)  # a body naming another queue: Dramatiq nacks it on the consumer it came from
    message.fail()  # nacked: the queue's dead letters keep it for whoever investigates
    if isinstance(message.options, dict):
        message.options["store_results"] = False  # never ran: Results must not store None for it
    raise SkipMessage(MISMATCH if refusal is None else refusal.reason)


def _arrival(message: Any, digest: str | None) -> dict[str, Any]:
    """What arrived, without a single argument value: actor, digest, counts and option names."""
    def count(value: Any) -> int | None:
        return len(value) if isinstance(value, list | tuple | Mapping) else None

    options = message.options if isinstance(message.options, Mapping) else {}
    names = sorted(str(name)[:_MAX_NAME] for name in itertools.islice(options, _MAX_NAMES))
    return {"actor": str(message.actor_name)[:_MAX_NAME], "queue": str(message.queue_name)[:_MAX_NAME],
            "digest": digest, "args": count(message.args), "kwargs": count(message.kwargs),
            "options": names, "option_count": len(options),
            "redelivered": getattr(message, "redelivered", None)}


def _as_dict(message: Any) -> dict[str, Any]:
    return {"actor_name": message.actor_name, "args": message.args, "kwargs": message.kwargs,
            "options": message.options}
