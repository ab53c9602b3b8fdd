"""reliable's timings against RabbitMQ's consumer_timeout, as pure decisions.

RabbitMQ closes a channel that holds a delivery unacknowledged longer than `consumer_timeout`
(30 min by default since 3.8.15; 3.10 does not say its value over AMQP) and redelivers every
unacked message of that channel. A Dramatiq worker holds a delivery unacked while its job runs and
while a delayed message waits for its eta, so a time limit, or a delay, longer than the timeout
makes the broker take the message back mid-run. The fencing in the store keeps such a job from
finishing twice, but the channel's other deliveries are redelivered too, so the boot check warns
(or, when strict, refuses to boot) and `ReliableRabbitmqBroker` re-holds long delays.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ConfigError

__all__ = ["DEFAULT_CONSUMER_TIMEOUT", "MAX_BROKER_DELAY", "UNTRACKED", "TimeoutReport", "held_unacked", "hold_limit",
           "timeout_issues", "timeout_report"]

#: RabbitMQ's default consumer_timeout (seconds) since 3.8.15.
DEFAULT_CONSUMER_TIMEOUT = 30 * 60.0
#: Delays up to this long ride Dramatiq's delay queue; longer ones are left to the recovery loop
#: (RabbitMQ's consumer_timeout would close a channel holding a delayed message for 30 min).
MAX_BROKER_DELAY = 15 * 60.0
#: Marks the issues of actors declared with reliable=False (no claim fences their redelivered copy).
UNTRACKED = "UNTRACKED (reliable=False)"
#: The margin kept below the timeout: a tenth of it, at least 2 s (a consumer looks at its held
#: messages about once a second, its ack then travels), at most 60 s.
_MARGIN_SHARE, _MARGIN_MIN, _MARGIN_MAX = 0.1, 2.0, 60.0


def hold_limit(consumer_timeout: float) -> float:
    """The longest a worker may hold a delivery unacknowledged: the timeout minus a margin (s)."""
    margin = min(_MARGIN_MAX, max(_MARGIN_MIN, consumer_timeout * _MARGIN_SHARE))
    if consumer_timeout <= 2 * margin:
        raise ConfigError(f"consumer_timeout {consumer_timeout:g}s is too short: it must exceed {2 * margin:g}s "
                          "(twice the margin reliable keeps below it)")
    return consumer_timeout - margin


def held_unacked(time_limit: float, *, prefetch: int, threads: int) -> float:
    """The longest a delivery of an actor with `time_limit` can stay unacknowledged in a worker (s).

    Dramatiq prefetches `prefetch` deliveries per queue (2 x threads by default, dramatiq/worker.py)
    and runs them on `threads` threads, so a delivery may wait behind prefetch/threads rounds of
    jobs before it runs its own: (prefetch/threads + 1) x time_limit, a conservative estimate
    (taking the other deliveries to run as long). `threads` 0: the worker is unknown, only the run counts.
    """
    if threads <= 0:
        return time_limit
    return (prefetch / threads + 1) * time_limit


def timeout_issues(*, consumer_timeout: float, lease_ttl: float, time_limits: Mapping[str, float | None],
                   broker_delay: float, rehold: bool, untracked_limits: Mapping[str, float | None] | None = None,
                   prefetch: int = 0, threads: int = 0) -> list[str]:
    """What does not fit under the consumer timeout's hold limit, one sentence each (empty: all fits).

    `time_limits`: each tracked actor's time limit in seconds (None: unbounded, no TimeLimit);
    `untracked_limits`: the same for actors declared with reliable=False (no claim fences their
    redelivered copy: it runs again); `broker_delay`: the longest delay reliable itself leaves to the
    broker (a retry's backoff); `rehold`: whether the broker re-publishes delayed messages before the
    timeout; `prefetch`, `threads`: the worker's queue prefetch and thread count (`held_unacked`).
    """
    return [issue.text for issue in _issues(consumer_timeout=consumer_timeout, lease_ttl=lease_ttl,
                                            time_limits=time_limits, broker_delay=broker_delay, rehold=rehold,
                                            untracked_limits=untracked_limits, prefetch=prefetch, threads=threads)]


@dataclass(frozen=True)
class _Issue:
    text: str
    risk: bool  # the run (or the lease, or a delay) alone exceeds the hold limit, not only the prefetch estimate
    actor: str | None = None


@dataclass(frozen=True)
class TimeoutReport:
    """A worker's timings against the consumer timeout: one line for the boot log, and the real risks.

    `summary`: the timeout, the hold limit, the lease TTL, the actors' time limits, and how many
    actors could only exceed the limit if every delivery prefetched before them ran to its own time
    limit (Dramatiq's default 600 s under the default prefetch does: a possibility, not a risk);
    `risks`: one sentence per timing that exceeds the hold limit by itself (a warning each);
    `possible`: one sentence per actor that exceeds it only with the prefetch estimate.
    """

    summary: str
    risks: tuple[str, ...]
    possible: tuple[str, ...] = ()


def timeout_report(*, consumer_timeout: float, lease_ttl: float, time_limits: Mapping[str, float | None],
                   broker_delay: float, rehold: bool, untracked_limits: Mapping[str, float | None] | None = None,
                   prefetch: int = 0, threads: int = 0) -> TimeoutReport:
    """The boot line and the risks of these timings (arguments as `timeout_issues`)."""
    issues = _issues(consumer_timeout=consumer_timeout, lease_ttl=lease_ttl, time_limits=time_limits,
                     broker_delay=broker_delay, rehold=rehold, untracked_limits=untracked_limits, prefetch=prefetch,
                     threads=threads)
    limits = [*(time_limits or {}).values(), *(untracked_limits or {}).values()]
    groups = Counter("none" if seconds is None else f"{seconds:g}s" for seconds in limits)
    described = ", ".join(f"{value} ({count} actor{'s' if count != 1 else ''})"
                          for value, count in sorted(groups.items()))
    summary = (f"timeouts: RabbitMQ consumer_timeout {consumer_timeout:g}s (a delivery is held unacknowledged "
               f"{hold_limit(consumer_timeout):g}s at most), lease_ttl {lease_ttl:g}s, time limits: "
               f"{described or 'no actors'}")
    possible = [issue for issue in issues if not issue.risk]
    if possible:
        worst = max(held_unacked(seconds, prefetch=prefetch, threads=threads)
                    for actor, seconds in {**(time_limits or {}), **(untracked_limits or {})}.items()
                    if seconds is not None and actor in {issue.actor for issue in possible})
        summary += (f"; {len(possible)} actor{'s' if len(possible) != 1 else ''} could stay unacknowledged up to "
                    f"{worst:g}s only if the {prefetch} deliveries prefetched on {threads} threads all ran to their "
                    "time limit (lower time_limit or dramatiq_queue_prefetch if jobs run that long)")
    risks = tuple(issue.text for issue in issues if issue.risk)
    if risks:
        summary += f"; {len(risks)} risk{'s' if len(risks) != 1 else ''} (warnings follow)"
    return TimeoutReport(summary, risks, tuple(issue.text for issue in possible))


def _issues(*, consumer_timeout: float, lease_ttl: float, time_limits: Mapping[str, float | None],
            broker_delay: float, rehold: bool, untracked_limits: Mapping[str, float | None] | None,
            prefetch: int, threads: int) -> list[_Issue]:
    limit = hold_limit(consumer_timeout)
    issues = []
    if lease_ttl > limit:
        issues.append(_Issue(
            f"lease_ttl {lease_ttl:g}s exceeds the consumer_timeout {consumer_timeout:g}s less its margin "
            f"({limit:g}s): RabbitMQ would take a hung worker's message back before reliable's lease expires", True))
    actors = [(actor, seconds, True) for actor, seconds in (time_limits or {}).items()]
    actors += [(actor, seconds, False) for actor, seconds in (untracked_limits or {}).items()]
    for actor, seconds, tracked in sorted(actors):
        consequence = ("the store fences the copy" if tracked else
                       f"{UNTRACKED}: no claim stops the redelivered copy, the job RUNS AGAIN")
        if seconds is None:
            issues.append(_Issue(
                f"actor {actor!r} has no time limit (no TimeLimit middleware): a run longer than the "
                f"consumer_timeout {consumer_timeout:g}s makes RabbitMQ close the worker's channel and "
                f"redeliver its messages ({consequence})", True, actor))
            continue
        held = held_unacked(seconds, prefetch=prefetch, threads=threads)
        if held > limit:
            waits = (f" (waiting behind a prefetch of {prefetch} on {threads} threads, up to {held:g}s unacked)"
                     if held != seconds else "")
            issues.append(_Issue(
                f"actor {actor!r}: time_limit {seconds:g}s{waits} exceeds the consumer_timeout "
                f"{consumer_timeout:g}s less its margin ({limit:g}s): RabbitMQ would close the "
                f"worker's channel mid-run and redeliver its messages ({consequence}; raise "
                "consumer_timeout on the broker, lower time_limit, or lower the prefetch: "
                "dramatiq_queue_prefetch)", seconds > limit or not tracked, actor))
    if not rehold and broker_delay > limit:
        issues.append(_Issue(
            f"retries delayed up to {broker_delay:g}s are held unacknowledged in worker memory, longer "
            f"than the consumer_timeout {consumer_timeout:g}s allows ({limit:g}s): use "
            "reliable.rabbitmq.ReliableRabbitmqBroker (it re-holds long delays) or raise consumer_timeout", True))
    return issues
