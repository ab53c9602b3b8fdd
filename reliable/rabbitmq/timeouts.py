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

__all__ = ["DEFAULT_CONSUMER_TIMEOUT", "hold_limit", "timeout_issues"]

#: RabbitMQ's default consumer_timeout (seconds) since 3.8.15.
DEFAULT_CONSUMER_TIMEOUT = 30 * 60.0
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


def timeout_issues(*, consumer_timeout: float, lease_ttl: float, time_limits: Mapping[str, float | None],
                   broker_delay: float, rehold: bool) -> list[str]:
    """What does not fit under the consumer timeout, one sentence each (empty: all fits).

    `time_limits`: each tracked actor's time limit in seconds (None: unbounded, no TimeLimit);
    `broker_delay`: the longest delay reliable itself leaves to the broker (a retry's backoff);
    `rehold`: whether the broker re-publishes delayed messages before the timeout.
    """
    limit = hold_limit(consumer_timeout)
    issues = []
    if lease_ttl >= consumer_timeout:
        issues.append(f"lease_ttl {lease_ttl:g}s is not below the broker's consumer_timeout {consumer_timeout:g}s: "
                      "RabbitMQ would take a hung worker's message back before reliable's lease expires")
    for actor, seconds in sorted(time_limits.items()):
        if seconds is None:
            issues.append(f"actor {actor!r} has no time limit (no TimeLimit middleware): a run longer than the "
                          f"consumer_timeout {consumer_timeout:g}s makes RabbitMQ close the worker's channel and "
                          "redeliver its messages")
        elif seconds > limit:
            issues.append(f"actor {actor!r}: time_limit {seconds:g}s exceeds the consumer_timeout "
                          f"{consumer_timeout:g}s less its margin ({limit:g}s): RabbitMQ would close the "
                          "worker's channel mid-run and redeliver its messages (the store fences the copy; "
                          "raise consumer_timeout on the broker or lower time_limit)")
    if not rehold and broker_delay > limit:
        issues.append(f"retries delayed up to {broker_delay:g}s are held unacknowledged in worker memory, longer "
                      f"than the consumer_timeout {consumer_timeout:g}s allows ({limit:g}s): use "
                      "reliable.rabbitmq.ReliableRabbitmqBroker (it re-holds long delays) or raise consumer_timeout")
    return issues
