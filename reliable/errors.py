"""Every error reliable raises, in one small hierarchy.

    ReliableError
    ├── ConfigError                 bad argument, URL or setting
    │   ├── PolicyError             a policy / rule file is wrong (names file, line, field)
    │   ├── BrokerConfigError       RabbitMQ queues or timeouts do not fit (stops a worker's boot)
    │   ├── HeartbeatTooSlow        a heartbeat interval not below its lease TTL (also a ValueError)
    │   ├── ReasonRequired          an operator command without a reason (nothing was written)
    │   ├── InvalidReason           a reason with control characters (the refusal is audited)
    │   └── TextTooLong             a human-entered text past reliable.inputs.MAX_TEXT (nothing written)
    ├── StoreError                  the state store cannot serve the request
    │   ├── StoreUnavailable        an outage: the database cannot be reached (waiting can help)
    │   │   └── SendTimedOut        `.send()` waited its send_timeout for the store; nothing was sent
    │   └── StoreMisconfigured      a configuration error (also a ConfigError): fix it, then retry
    │       └── StoreNotMigrated    the schema is missing or older than the code
    ├── JobNotFound                 no job with that id
    ├── JobIdConflict               a new message reuses a job's id with another actor or arguments
    ├── MessageRefused              a message cannot become a job: its id, size or options (inputs, options)
    ├── RegistrationFailed          send() could not register its job (an unexpected error): nothing published
    ├── OperationNotFound           no bulk operation with that id
    ├── ScheduleNotFound            no schedule with that name
    ├── ProcessNotFound             no worker process on record with that id
    ├── NamedQueryError             a store query name that does not exist, or a parameter missing
    ├── TransitionRefused           the state machine or a compare-and-set refused a change
    │   ├── ClaimRefused            a worker may not run this job now (reason says why)
    │   └── LeaseLost               a worker's write lost its fencing race
    └── ControlRefused              an operator command was not allowed (authorization, validation)

`JobInterrupted` and its subclasses are *not* ReliableErrors: they derive from Dramatiq's
`Interrupt` (a BaseException) so that an actor's `except Exception:` cannot swallow a pause,
stop, cancel or lost lease observed at a checkpoint.
"""

from __future__ import annotations

from dramatiq.errors import BrokerConnectionError
from dramatiq.middleware import Interrupt, MiddlewareError

__all__ = [
    "ActorContractError",
    "BrokerConfigError",
    "BrokerUnreachable",
    "ClaimRefused",
    "ConfigError",
    "ControlRefused",
    "HeartbeatTooSlow",
    "InvalidReason",
    "JobCancelled",
    "JobForceStopped",
    "JobIdConflict",
    "JobInterrupted",
    "JobNotFound",
    "JobPaused",
    "JobStopped",
    "LeaseLost",
    "LeaseLostInterrupt",
    "MessageRefused",
    "NamedQueryError",
    "NotAuthorized",
    "OperationNotFound",
    "PolicyError",
    "ProcessNotFound",
    "ReasonRequired",
    "RegistrationFailed",
    "ReliableError",
    "ScheduleNotFound",
    "SendTimedOut",
    "StoreError",
    "StoreMisconfigured",
    "StoreNotMigrated",
    "StoreUnavailable",
    "TransitionRefused",
    "WorkflowResultUnavailable",
    "client_message",
]


class ReliableError(Exception):
    """Base class of every error reliable raises on purpose."""


class ConfigError(ReliableError):
    """A configuration value (URL, option, setting) is wrong."""


class HeartbeatTooSlow(ConfigError, ValueError):
    """The heartbeat interval is not below the lease TTL (a ValueError too, as it always was).

    Raised by `reliable.policy.check_heartbeat`, the one check of that rule.
    """


class PolicyError(ConfigError):
    """A policy or rule file is invalid; the message names file, line and field."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.path = path
        self.line = line
        self.field = field
        where = path or "<policy>"
        if line is not None:
            where = f"{where}:{line}"
        prefix = f"{where}: " if path or line is not None else ""
        suffix = f" (field: {field})" if field else ""
        super().__init__(f"{prefix}{message}{suffix}")


class ReasonRequired(ConfigError):
    """An operator command was given no reason (or a blank one); raised before anything is read or written."""

    def __init__(self, command: str) -> None:
        self.command = command
        super().__init__(f"{command} needs a reason: say why (it is recorded on every job the command changes)")


class InvalidReason(ConfigError):
    """An operator command's reason holds control characters (reliable.inputs.text_problem): refused,
    and audited as `command_refused` with the reason escaped when the job exists."""

    def __init__(self, command: str, problem: str) -> None:
        self.command = command
        super().__init__(f"{command}: field 'reason': {problem}")


class TextTooLong(ConfigError):
    """A human-entered text (a reason, a name, a label) longer than its limit (reliable.inputs:
    `MAX_TEXT`, or `MAX_NAME` for a name); raised before anything is read or written."""

    def __init__(self, field: str, problem: str, *, where: str | None = None) -> None:
        self.field = field
        super().__init__(f"{where + ': ' if where else ''}field {field!r}: {problem}")


class BrokerConfigError(ConfigError, MiddlewareError):
    """RabbitMQ's queues or timeouts do not fit reliable (a queue declared with other arguments, a
    delivery limit at or below max attempts, a time limit past the consumer timeout when strict);
    a MiddlewareError, so that raised at worker boot it stops the boot (`reliable.rabbitmq`)."""


class BrokerUnreachable(ReliableError, MiddlewareError, BrokerConnectionError):
    """A worker was asked to stop while its boot waited for RabbitMQ to answer: Dramatiq (and
    `reliable worker`) take it as the broker connection failing at boot (exit 3)."""

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)
        self.message = message  # what Dramatiq's errors print


class ActorContractError(PolicyError, MiddlewareError):
    """An actor's declaration contradicts itself or the policy (e.g. `fast_path=True` with
    `resumable=True`); raised from `@dramatiq.actor` (a MiddlewareError, so Dramatiq lets it through)."""


class StoreError(ReliableError):
    """The state store cannot serve the request."""


class StoreUnavailable(StoreError):
    """An outage: the database cannot be reached (connection refused, timed out, locked for too
    long, starting up, a failover): waiting can help (`reliable.store.faults`)."""


class SendTimedOut(StoreUnavailable, MiddlewareError):
    """A send (`actor.send()`, `enqueue_many`, a group) waited its `send_timeout` for an unreachable
    store: the job was not registered and the message not published. A MiddlewareError, so that
    Dramatiq lets it through `send()` to the caller instead of logging it and publishing anyway."""


class StoreMisconfigured(StoreError, ConfigError, MiddlewareError):
    """A configuration error: the store URL's database, credentials or rights, or the schema, are
    wrong, so waiting cannot help; the message says what to fix or run (`reliable.store.faults`).

    A MiddlewareError, so that Dramatiq lets it through `send()` and stops a worker's boot with it.
    """

    #: The schema is missing or older than the code (the fix is `reliable db upgrade`).
    schema = False


class StoreNotMigrated(StoreMisconfigured):
    """The database schema is missing or older than this version of reliable."""

    schema = True


class WorkflowResultUnavailable(ReliableError):
    """A workflow node's parent succeeded but its result could not be kept in the store."""


class JobNotFound(ReliableError):
    """No job has the given id."""

    def __init__(self, job_id: str, *, hint: str | None = None) -> None:
        self.job_id = job_id
        super().__init__(f"no job with id {job_id!r}" + (f" ({hint})" if hint else ""))


class JobIdConflict(ReliableError, MiddlewareError):
    """A message was sent under the id of an existing job, but with another actor, other arguments
    or other behaviour-choosing options: it is not that job, and it is not published.

    An identical re-send (same actor, arguments and options) stays a de-duplication, never this
    error. `differs` is "actor" or "arguments or options". A MiddlewareError, so that Dramatiq lets
    it through `send()` to the caller instead of logging it and publishing the message anyway.
    """

    def __init__(self, job_id: str, *, differs: str, actor: str | None = None,
                 registered_actor: str | None = None) -> None:
        self.job_id = job_id
        self.differs = differs
        self.actor = actor
        self.registered_actor = registered_actor
        if differs == "actor":
            what = f"actor {actor!r}, but the job runs {registered_actor!r}"
        else:
            what = f"other arguments or options for actor {actor!r} than the job was registered with"
        super().__init__(f"job {job_id} exists: this message has {what}; a new job needs a new message id "
                         "(an identical re-send is de-duplicated)")


class MessageRefused(ReliableError, MiddlewareError, ValueError):
    """A message that cannot become a job: its id breaks the job id rule, it is larger than the
    largest message a job may carry (reliable.inputs), or an option that chooses its behaviour
    breaks that option's rule (reliable.options). Nothing was registered or published.

    `field` names what is wrong ("message_id", "workflow_id", "parent_job_id", "size", or
    "options.<name>", e.g. "options.max_retries"). A
    MiddlewareError, so that Dramatiq lets it through `send()` to the caller.
    """

    def __init__(self, field: str, problem: str, *, actor: str | None = None) -> None:
        self.field = field
        self.problem = problem
        self.actor = actor
        what = f"a message of actor {actor!r}" if actor else "a message"
        super().__init__(f"{what} cannot become a job: {field}: {problem}")


class RegistrationFailed(ReliableError, MiddlewareError):
    """`send()` could not register its job for a reason no other error names (a policy that cannot
    decide, a bug): the message was not published. A MiddlewareError, so that Dramatiq lets it through
    `send()` to the caller instead of logging it and publishing a message no job row backs.
    The original error is its `__cause__`.
    """

    def __init__(self, message_id: str, actor: str, cause: BaseException) -> None:
        self.message_id = message_id
        self.actor = actor
        super().__init__(f"message {message_id} of actor {actor!r} was not sent: registering its job failed with "
                         f"{type(cause).__name__}: {cause}")


class OperationNotFound(ReliableError):
    """No bulk operation (`reliable.operations`) has the given id."""

    def __init__(self, operation_id: str) -> None:
        self.operation_id = operation_id
        super().__init__(f"no bulk operation with id {operation_id!r}")


class TransitionRefused(ReliableError):
    """A transition was refused: not allowed from the current state, or someone else won the race."""

    def __init__(self, message: str, *, job_id: str | None = None, status: str | None = None,
                 event: str | None = None) -> None:
        self.job_id = job_id
        self.status = status
        self.event = event
        super().__init__(message)


class ClaimRefused(TransitionRefused):
    """A worker's claim was refused; `reason` is one of the REASONS and `retry_in` is set for not_due."""

    REASONS = ("finished", "held", "paused", "stopped", "not_due", "review", "not_found", "delivery_mismatch")

    def __init__(self, job_id: str, reason: str, *, status: str | None = None,
                 retry_in: float | None = None) -> None:
        self.reason = reason
        self.retry_in = retry_in
        super().__init__(f"job {job_id}: claim refused ({reason}, status {status})", job_id=job_id,
                         status=status, event="claim")


class LeaseLost(TransitionRefused):
    """A worker's fenced write was refused: its lease expired or was reassigned."""

    def __init__(self, job_id: str, lease_id: int, *, current_lease_id: int | None = None,
                 status: str | None = None) -> None:
        self.lease_id = lease_id
        self.current_lease_id = current_lease_id
        super().__init__(
            f"job {job_id}: lease {lease_id} is no longer held "
            f"(current lease {current_lease_id}, status {status})",
            job_id=job_id, status=status,
        )


class ControlRefused(ReliableError):
    """An operator command was refused (not authorized, or its preconditions do not hold).

    why: the refusal itself; hint: what to do instead, when there is advice (the message is both,
    so a list of many refusals can show the why per job and the hint once).
    """

    def __init__(self, why: str, *, hint: str | None = None) -> None:
        super().__init__(f"{why}; {hint}" if hint else why)
        self.why = why
        self.hint = hint


class NotAuthorized(ControlRefused):
    """An operator command was refused because the operators policy does not allow it (HTTP 403)."""


class JobInterrupted(Interrupt):
    """Raised inside an actor at a checkpoint when the job must stop running now."""

    reason = "interrupted"


class JobPaused(JobInterrupted):
    """An operator asked to pause the job; it checkpointed and will move to PAUSED."""

    reason = "pause"


class JobStopped(JobInterrupted):
    """An operator asked to stop the job; it checkpointed and will move to STOPPED."""

    reason = "stop"


class JobCancelled(JobInterrupted):
    """An operator asked to cancel the job; it will move to CANCELLED."""

    reason = "cancel"


class JobForceStopped(JobInterrupted):
    """The job kept running past its stop grace period; its thread was terminated."""

    reason = "force_stop"


class LeaseLostInterrupt(JobInterrupted):
    """The worker no longer holds the job's lease; any further work would be a stale commit."""

    reason = "lease_lost"


class ScheduleNotFound(ReliableError):
    """No schedule (`reliable.schedules`) has the given name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no schedule named {name!r} (`reliable schedules list` shows them)")


class ProcessNotFound(ReliableError):
    """No worker process on record has the given worker id (HTTP 404)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        super().__init__(f"no worker process with id {worker_id!r} on record")


class NamedQueryError(ReliableError, LookupError):
    """A named query (reliable/store/sql/<dialect>.sql) that does not exist, or run without a
    parameter it needs: a bug in the caller, raised before anything is sent to the database."""


def client_message(exc: BaseException) -> str:
    """What a client (an API caller, a console user, a bulk operation's record) is told of `exc`: a
    store error's own text names the database (its URL, user, host, database name) and is for the
    server's log only; any other error's text as it is."""
    if isinstance(exc, StoreError):
        return (f"the state store could not serve this request ({type(exc).__name__}); try again, or see the "
                "server's log")
    return str(exc)
