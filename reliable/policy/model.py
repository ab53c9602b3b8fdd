"""The policy engine's value types: settings, the job contract, a failure and the decision. Pure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import HeartbeatTooSlow

__all__ = [
    "ACTIONS",
    "BUILTIN_CLASSES",
    "JITTERS",
    "RATE_LIMITED_MARK",
    "Action",
    "BackoffSettings",
    "ClassSpec",
    "Decision",
    "Failure",
    "Jitter",
    "JobContract",
    "LeaseSettings",
    "RateLimitSettings",
    "RetryBudget",
    "check_heartbeat",
]

Action = Literal["retry", "requeue", "fail", "review", "dead", "halt"]
Jitter = Literal["full", "equal", "none"]

#: Actions an error class may map to (`requeue` is for crashes only).
ACTIONS: tuple[str, ...] = ("retry", "fail", "review", "dead", "halt")
JITTERS: tuple[str, ...] = ("full", "equal", "none")


@dataclass(frozen=True)
class LeaseSettings:
    """Lease timing, in seconds. Database time decides expiry; `heartbeat_interval` must be below `ttl`."""

    ttl: float = 30.0
    heartbeat_interval: float = 10.0
    recovery_interval: float = 5.0
    sweep_after: float = 300.0
    retry_grace: float = 30.0

    def __post_init__(self) -> None:
        for name in ("ttl", "heartbeat_interval", "recovery_interval", "sweep_after"):
            if not getattr(self, name) > 0:
                raise ValueError(f"lease.{name} must be more than zero")
        if self.retry_grace < 0:
            raise ValueError("lease.retry_grace must be zero or more")
        check_heartbeat(self.heartbeat_interval, self.ttl)


def check_heartbeat(interval: float, ttl: float, *, names: tuple[str, str] = ("lease.heartbeat_interval", "lease.ttl"),
                    fix: str = "") -> None:
    """The one rule between the two lease timings: a heartbeat renews the leases it holds, so its
    interval must be below the lease TTL, or every lease would expire between two heartbeats.

    Raises HeartbeatTooSlow (a ConfigError and a ValueError) naming both settings by `names` (how
    the caller's user wrote them), with `fix` appended when given.
    """
    if interval < ttl:
        return
    interval_name, ttl_name = names
    message = f"{interval_name} ({interval:g}s) must be less than {ttl_name} ({ttl:g}s)"
    raise HeartbeatTooSlow(f"{message}: {fix}" if fix else message)


@dataclass(frozen=True)
class BackoffSettings:
    """Exponential backoff: retry n (0-based) waits up to min(cap, base * 2**n) seconds, jittered.

    `floor` is the least any retry waits (Dramatiq's `min_backoff` sets it): the jittered delay is
    spread over [floor, ceiling] instead of [0, ceiling].
    """

    base: float = 1.0
    cap: float = 300.0
    jitter: Jitter = "full"
    floor: float = 0.0


@dataclass(frozen=True)
class RateLimitSettings:
    """How `rate_limited` failures are retried: they do not count toward max_attempts, but have their own cap.

    `max_wait` caps a Retry-After; `max_retries` rate-limited retries per job, then DEAD; rate limiting is
    *sustained* (the decision raises an alert) from the `alert_after`-th rate-limited retry of a job on.
    """

    max_wait: float = 600.0
    max_retries: int = 20
    alert_after: int = 5


@dataclass(frozen=True)
class RetryBudget:
    """Retry-storm protection: at most `per_minute` retries scheduled per actor in a sliding minute.

    Past it, a retry becomes DEAD (`on_exhausted: dead`) or waits at least `delay` (`on_exhausted: delay`).
    """

    per_minute: int = 600
    on_exhausted: Literal["dead", "delay"] = "delay"
    delay: float = 300.0

    @property
    def window(self) -> float:
        """The window, in seconds, over which the caller counts `Failure.recent_retries`."""
        return 60.0


@dataclass(frozen=True)
class ClassSpec:
    """What an error class does: its action, whether it alerts, whether it honours Retry-After."""

    name: str
    action: Literal["retry", "fail", "review", "dead", "halt"]
    alert: bool = False
    rate_limited: bool = False
    description: str = ""
    #: Retry routing: the queue this class's retries wait on (None: the job's own queue), from the
    #: retry after the first `queue_after` retries on (reliable.policy.routes).
    queue: str | None = None
    queue_after: int = 0


#: The built-in error classes (a policy may change their action or add its own classes).
BUILTIN_CLASSES: dict[str, ClassSpec] = {
    spec.name: spec for spec in (
        ClassSpec("transient", "retry", description="temporary: retry with exponential backoff and jitter"),
        ClassSpec("rate_limited", "retry", rate_limited=True,
                  description="throttled: wait for Retry-After; counted apart from failures"),
        ClassSpec("invalid_input", "fail", description="the message itself is wrong: fail fast"),
        ClassSpec("side_effect_unknown", "review",
                  description="a side effect may have happened: a person reconciles; never retried automatically"),
        ClassSpec("authorization", "halt", alert=True, description="not allowed: stop the job and alert the owner"),
    )
}


@dataclass(frozen=True)
class JobContract:
    """What reliable may assume about an actor's jobs (resolved from policy and actor options).

    Precedence, lowest first: built-in defaults, the policy's `defaults`, its `queues.<queue>`, its
    `actors.<actor>`, then the Dramatiq actor options.
    """

    owner: str | None = None
    idempotent: bool = True
    resumable: bool = False
    #: Short idempotent actors: no claim before the run, one compare-and-set after a success
    #: (docs/concepts.md, "The fast path"). Refused with resumable or idempotent=False.
    fast_path: bool = False
    checkpoint_schema: int | None = None
    stop_grace: float = 30.0
    max_attempts: int = 5
    retry_on_crash: bool = True
    compensation: str | None = None
    #: `module:function` called with the Job before an operator's resume; False or raising refuses it.
    resume_validator: str | None = None
    sla_running: float | None = None
    sla_stopping: float | None = None
    sla_paused: float | None = None
    backoff: BackoffSettings = field(default_factory=BackoffSettings)
    #: Class of a failure no rule matches; None: transient for idempotent jobs, side_effect_unknown otherwise.
    default_class: str | None = None
    rate_limit: RateLimitSettings = field(default_factory=RateLimitSettings)
    retry_budget: RetryBudget | None = field(default_factory=RetryBudget)
    #: After a crash that may be retried: `requeue` (PENDING now) or `retry` (RETRY_WAIT after backoff).
    on_crash: Literal["requeue", "retry"] = "requeue"

    @property
    def fallback_class(self) -> str:
        """The class of a failure no rule matches."""
        if self.default_class is not None:
            return self.default_class
        return "transient" if self.idempotent else "side_effect_unknown"


@dataclass(frozen=True)
class Failure:
    """A failed attempt, as the middleware hands it to `Policy.decide`.

    `attempt` is the attempt that just failed (1-based, every attempt counted); `rate_limited_retries`
    says how many earlier attempts ended rate limited (those do not count toward max_attempts);
    `recent_retries` is the number of retries scheduled for this actor in the budget window.
    """

    exception: BaseException
    actor: str
    queue: str
    attempt: int
    retry_count: int
    contract: JobContract
    now: float
    recent_retries: int = 0
    rand: Callable[[], float] | None = None
    rate_limited_retries: int = 0
    #: Dramatiq's `throws` option: exception classes that fail the job at once (never retried).
    throws: type[BaseException] | tuple[type[BaseException], ...] | None = None
    #: Dramatiq's `retry_when(retries, exception)`: when set, it alone says whether a retryable
    #: failure is retried (instead of max_attempts); False means the retries are exhausted.
    retry_when: Callable[[int, BaseException], bool] | None = None


#: How the JSON detail of a rate-limited retry's event says so (`Decision.as_detail`, compact JSON):
#: the middleware counts them, the failure-rate alert leaves them out.
RATE_LIMITED_MARK = '"rate_limited":true'


@dataclass(frozen=True)
class Decision:
    """What becomes of a failed or crashed attempt, and why.

    retry -> RETRY_WAIT after `delay`; requeue -> PENDING now (crash only); fail -> FAILED;
    review -> REVIEW; dead -> DEAD; halt -> STOPPED and an alert.
    """

    action: Action
    error_class: str
    rule: str | None
    delay: float | None
    reason: str
    alert: bool
    rate_limited: bool = False
    budget_exhausted: bool = False
    #: DEAD because no retry is left (max_attempts or retry_when): Dramatiq's on_retry_exhausted applies.
    retries_exhausted: bool = False
    exception_type: str | None = None
    message: str | None = None  # the exception's message, secrets masked (reliable.redact.redact_secrets)
    attempt: int | None = None
    retry_count: int | None = None
    #: A retry's queue when the policy routes it (None: the job's own queue, the one it was enqueued on).
    queue: str | None = None

    def as_detail(self) -> dict[str, Any]:
        """A JSON-ready dict for the event row (`queue` only for a routed retry)."""
        detail = {
            "action": self.action,
            "error_class": self.error_class,
            "rule": self.rule,
            "delay": self.delay,
            "reason": self.reason,
            "alert": self.alert,
            "rate_limited": self.rate_limited,
            "budget_exhausted": self.budget_exhausted,
            "retries_exhausted": self.retries_exhausted,
            "exception_type": self.exception_type,
            "message": self.message,
            "attempt": self.attempt,
            "retry_count": self.retry_count,
        }
        if self.queue is not None:
            detail["queue"] = self.queue
        return detail
