"""The worker-boot check of the broker: it answers, delivery limit, queue declarations, consumer_timeout.

Called by `ReliableMiddleware.before_worker_boot`. A broker that is not a RabbitmqBroker is left
alone. First RabbitMQ must answer (`reach.wait_for_broker`): a refused login, an unknown virtual
host or a failed TLS handshake stops the boot (BrokerConfigError, one line with the fix); an outage
is waited for, logged at each try, so that the worker never says it is ready before RabbitMQ
answered. For a `ReliableRabbitmqBroker`: a delivery limit at or below an actor's max attempts, or a
queue RabbitMQ refuses to declare as configured, stops the boot (BrokerConfigError). Timings that
do not fit under the consumer timeout (a plain RabbitmqBroker is taken to have RabbitMQ's default
30 min) are summarised in one INFO line per boot; a timing that exceeds the hold limit by itself
(a time limit, no time limit, the lease TTL, a retry delay) is also a warning (an error for actors
declared with reliable=False: nothing fences their redelivered copy), or stops the boot with
`strict_timeouts=True` (which also refuses the next case). Exceeding it only with the wait behind
the worker's prefetch (every prefetched delivery running to its own time limit:
`timeouts.held_unacked`; Dramatiq's default 600 s limit does, under the default prefetch) is said
in the summary line only.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from ..errors import BrokerConfigError
from .reach import nodes_of, wait_for_broker
from .timeouts import DEFAULT_CONSUMER_TIMEOUT, MAX_BROKER_DELAY, UNTRACKED, timeout_report

__all__ = ["check_broker"]

logger = logging.getLogger("reliable.rabbitmq")


def check_broker(broker: Any, middleware: Any, worker: Any = None) -> None:
    """Check a RabbitMQ broker against the middleware's policy and timings (see the module doc).

    `worker`: the booting Dramatiq worker; its `queue_prefetch` and `worker_threads` tell how long a
    delivery may wait unacknowledged before it runs (None: only the run is counted)."""
    if "dramatiq.brokers.rabbitmq" not in sys.modules:
        return  # then `broker` cannot be a RabbitmqBroker, and pika stays unimported
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    from .broker import ReliableRabbitmqBroker

    if not isinstance(broker, RabbitmqBroker):
        return
    wait_for_broker(nodes_of(broker))
    declared = [broker.get_actor(name) for name in sorted(broker.get_declared_actors())]
    actors = [actor for actor in declared if middleware.tracked(broker, actor.actor_name)]
    untracked = [actor for actor in declared if not middleware.tracked(broker, actor.actor_name)]
    ours = broker if isinstance(broker, ReliableRabbitmqBroker) else None
    if ours is not None and ours.quorum:
        for actor in actors:
            attempts = middleware.contract_for(actor.actor_name, actor.queue_name).max_attempts
            if attempts >= ours.delivery_limit:
                raise BrokerConfigError(
                    f"actor {actor.actor_name!r} (queue {actor.queue_name!r}) may make {attempts} attempts, not "
                    f"below the broker's delivery_limit {ours.delivery_limit}: RabbitMQ would drop its message "
                    "before the policy decides; raise delivery_limit (the same in every process) above it")
    if ours is not None:
        for queue in sorted(ours.get_declared_queues()):
            ours.declare_queue(queue, ensure=True)  # a refused declaration stops the boot, not a consumer loop
    report = timeout_report(
        consumer_timeout=ours.consumer_timeout if ours is not None else DEFAULT_CONSUMER_TIMEOUT,
        lease_ttl=middleware.lease_ttl, time_limits={actor.actor_name: _time_limit(broker, actor) for actor in actors},
        untracked_limits={actor.actor_name: _time_limit(broker, actor) for actor in untracked},
        broker_delay=MAX_BROKER_DELAY, rehold=ours is not None,
        prefetch=int(getattr(worker, "queue_prefetch", 0) or 0), threads=int(getattr(worker, "worker_threads", 0) or 0))
    if (report.risks or report.possible) and ours is not None and ours.strict_timeouts:
        raise BrokerConfigError("consumer_timeout: " + "; ".join((*report.risks, *report.possible)))
    logger.info("%s", report.summary)  # one line per worker boot; a warning only for a real risk
    for issue in report.risks:
        if UNTRACKED in issue:
            logger.error("consumer_timeout: %s", issue)  # nothing fences a redelivered copy of it
        else:
            logger.warning("consumer_timeout: %s", issue)


def _time_limit(broker: Any, actor: Any) -> float | None:
    """The actor's time limit in seconds as Dramatiq's TimeLimit applies it (None: no TimeLimit)."""
    from dramatiq.middleware import TimeLimit

    limiter = next((m for m in broker.middleware if isinstance(m, TimeLimit)), None)
    if limiter is None:
        return None
    limit_ms = actor.options.get("time_limit", limiter.time_limit)
    return float(limit_ms) / 1000 if limit_ms else None


