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

from collections.abc import Mapping

from ..errors import ConfigError

__all__ = ["DEFAULT_CONSUMER_TIMEOUT", "UNTRACKED", "held_unacked", "hold_limit", "timeout_issues"]

#: RabbitMQ's default consumer_timeout (seconds) since 3.8.15.
DEFAULT_CONSUMER_TIMEOUT = 30 * 60.0
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
    limit = hold_limit(consumer_timeout)
    issues = []
    if lease_ttl > limit:
        issues.append(f"lease_ttl {lease_ttl:g}s exceeds the consumer_timeout {consumer_timeout:g}s less its margin "
                      f"({limit:g}s): RabbitMQ would take a hung worker's message back before reliable's lease "
                      "expires")
    actors = [(actor, seconds, True) for actor, seconds in (time_limits or {}).items()]
    actors += [(actor, seconds, False) for actor, seconds in (untracked_limits or {}).items()]
    for actor, seconds, tracked in sorted(actors):
        consequence = ("the store fences the copy" if tracked else
                       f"{UNTRACKED}: no claim stops the redelivered copy, the job RUNS AGAIN")
        if seconds is None:
            issues.append(f"actor {actor!r} has no time limit (no TimeLimit middleware): a run longer than the "
                          f"consumer_timeout {consumer_timeout:g}s makes RabbitMQ close the worker's channel and "
                          f"redeliver its messages ({consequence})")
            continue
        held = held_unacked(seconds, prefetch=prefetch, threads=threads)
        if held > limit:
            waits = (f" (waiting behind a prefetch of {prefetch} on {threads} threads, up to {held:g}s unacked)"
                     if held != seconds else "")
            issues.append(f"actor {actor!r}: time_limit {seconds:g}s{waits} exceeds the consumer_timeout "
                          f"{consumer_timeout:g}s less its margin ({limit:g}s): RabbitMQ would close the "
                          f"worker's channel mid-run and redeliver its messages ({consequence}; raise "
                          "consumer_timeout on the broker, lower time_limit, or lower the prefetch: "
                          "dramatiq_queue_prefetch)")
    if not rehold and broker_delay > limit:
        issues.append(f"retries delayed up to {broker_delay:g}s are held unacknowledged in worker memory, longer "
                      f"than the consumer_timeout {consumer_timeout:g}s allows ({limit:g}s): use "
                      "reliable.rabbitmq.ReliableRabbitmqBroker (it re-holds long delays) or raise consumer_timeout")
    return issues
