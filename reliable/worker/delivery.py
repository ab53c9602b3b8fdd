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
a message id that is no job id: reliable.inputs), or one that cannot become a job (too large:
`MessageRefused` at its registration), is refused the same way, whatever the store holds. With no
job to record it on, its `delivery_mismatch` record goes to the store's listeners only (the JSON
log line and the metric), its job id cut to 200 characters, as in every log line here.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping
from typing import Any, NoReturn

import dramatiq
from dramatiq.middleware import SkipMessage

from ..delivery_digest import delivery_digest, differences
from ..errors import ClaimRefused
from ..inputs import clip, job_id_problem
from ..store import StateStore

__all__ = ["MISMATCH", "delivered_digest", "digest_of", "malformed", "refuse"]

logger = logging.getLogger("reliable.worker.delivery")

#: The claim refusal's reason (ClaimRefused.reason) and the event's name.
MISMATCH = "delivery_mismatch"
#: Option names kept in the event: a forged message may carry any number of them.
_MAX_NAMES = 50
_MAX_NAME = 100


def malformed(message: Any) -> str | None:
    """What makes `message` no message of any job (None: its fields have a message's types and its
    id is a job id: reliable.inputs)."""
    if (problem := job_id_problem(message.message_id)) is not None:
        return f"its message id is refused: {problem}"
    for field, kind in (("args", (list, tuple)), ("kwargs", Mapping), ("options", Mapping)):
        if not isinstance(getattr(message, field), kind):
            return f"its {field} are a {type(getattr(message, field)).__name__}"
    return None


def delivered_digest(message: Any) -> str:
    """The digest of a delivery (a Dramatiq message or MessageProxy) whose fields are well formed."""
    # Dramatiq's own JSON encoder delivers values as json.loads gives them: hashed as they are.
    decoded = type(dramatiq.get_encoder()) is dramatiq.JSONEncoder
    return delivery_digest(message.actor_name, message.args, message.kwargs, message.options, decoded=decoded)


def digest_of(store: StateStore, message: Any, *, worker_id: str) -> str:
    """The delivery's digest, for its claim. A malformed delivery, or one whose values cannot be
    hashed, is refused here (`refuse`: raises SkipMessage)."""
    problem = malformed(message)
    if problem is None:
        try:
            return delivered_digest(message)
        except Exception as exc:  # values JSON cannot hold (a custom encoder's), nesting too deep
            problem = f"its arguments cannot be hashed ({type(exc).__name__})"
    refuse(store, message, None, worker_id=worker_id, problem=problem)


def refuse(store: StateStore, message: Any, refusal: ClaimRefused | None, *, worker_id: str,
           problem: str | None = None) -> NoReturn:
    """Record, log, dead-letter and skip a delivery that is not its job's message: `refusal` from
    the store (a digest that differs), or a malformed delivery (`problem`, see `malformed`)."""
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
    why = problem or ("differs in " + ", ".join(arrived.get("differs") or ["its digest"]))
    shown = clip(job_id)
    logger.warning("message %s refused, not run and dead-lettered: it is not the message of job %s (actor %r, %s)",
                   shown, shown, arrived["actor"], why)
    reason = f"a delivery that is not this job's message was refused: {why}"
    if job is not None:
        try:
            store.record_event(job.job_id, MISMATCH, worker_id=worker_id, detail=arrived, reason=reason)
        except Exception:
            logger.warning("job %s: could not record the refused delivery", shown, exc_info=True)
    else:  # no job to hold the record: the listeners (JSON log line, metric) still get it
        store.announce(MISMATCH, job_id=shown, worker_id=worker_id, actor=arrived["actor"], queue=arrived["queue"],
                       detail=arrived, reason=reason)
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
