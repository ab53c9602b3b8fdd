"""Store-derived gauges for the one exporter process: jobs by state, queue age, stuck jobs, depths.

`StoreCollector` is a custom Prometheus collector (register it on a normal registry in ONE
process, `reliable exporter`; custom collectors do not work inside multiprocess workers). Each
scrape runs a few read-only, index-backed queries (`reliable.store.gauges`) and, when
a broker URL is given, passive queue declarations on RabbitMQ. A failing source increments
``reliable_collector_errors_total{source}`` and the other gauges are still served.

Cost, by design: counts cover the states someone acts on (every state except SUCCEEDED, FAILED
and CANCELLED by default): final-state rows grow without bound and counting them costs a scan of
their index range on every scrape; their rates come from ``reliable_transitions_total``.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .queue_pauses import paused
from .rabbitmq.reach import explain, parse_url
from .states import UNFINISHED_STATES, JobStatus
from .store import StateStore
from .store.gauges import STUCK_STATES, GaugeReadings, read_gauges
from .store.processes import live_by_host_and_queue

__all__ = ["DEFAULT_COUNTED_STATES", "DEFAULT_SLA", "BrokerDepth", "StoreCollector", "broker_depths"]

logger = logging.getLogger("reliable.collector")

#: States counted by default: everything but the final outcomes nobody acts on.
DEFAULT_COUNTED_STATES: frozenset[JobStatus] = UNFINISHED_STATES

#: Seconds a job may stay in each state before it counts as stuck. RUNNING is measured from the
#: attempt's claim (started_at), STOPPING from the stop request, PAUSED from the pause (updated_at).
DEFAULT_SLA: Mapping[str, float] = {"RUNNING": 3600.0, "STOPPING": 300.0, "PAUSED": 86400.0}

_S = JobStatus
_BROKER_TIMEOUT = 3.0


def _parse_sla(sla: Mapping[str, float] | None) -> dict[JobStatus, float]:
    merged = {_S(k): float(v) for k, v in DEFAULT_SLA.items()}
    for key, seconds in (sla or {}).items():
        try:
            state = _S(str(key).upper())
        except ValueError:
            raise ValueError(f"sla: unknown state {key!r} (one of RUNNING, STOPPING, PAUSED)") from None
        if state not in STUCK_STATES:
            raise ValueError(f"sla: {key!r} has no stuck threshold (one of RUNNING, STOPPING, PAUSED)")
        if float(seconds) <= 0:
            raise ValueError(f"sla: {key!r} must be a positive number of seconds, not {seconds!r}")
        merged[state] = float(seconds)
    return merged


class StoreCollector(Collector):
    """A Prometheus collector reading gauges from the state store (and RabbitMQ queue depths).

    Families: ``reliable_jobs{state,queue}``, ``reliable_oldest_pending_timestamp_seconds{queue}``
    (the ``scheduled_at`` of the oldest due PENDING job: a timestamp, so ``time() - x`` is the
    queue age), ``reliable_jobs_stuck{state,queue}``, ``reliable_dead_letter_jobs{queue}``,
    ``reliable_review_jobs{queue}``, ``reliable_rabbitmq_queue_messages{queue}`` (for each known
    queue ``q``: ``q``, ``q.DQ`` and ``q.XQ`` where they exist), ``reliable_collector_errors_total
    {source}``, ``reliable_collector_scrape_seconds``, ``reliable_workflows{status}`` (unfinished
    statuses only), and per schedule (reliable.schedules)
    ``reliable_schedule_next_slot_timestamp_seconds{schedule}`` (not paused) and
    ``reliable_schedule_last_slot_timestamp_seconds{schedule}``,
    ``reliable_schedule_slot_conflicts_total{schedule}``.

    Parameters:
      store: the StateStore to read (only its engine is used, read-only).
      broker_url: an amqp:// URL, or several ';'-separated (a cluster's nodes, tried in turn); without it
        no broker gauges are exported.
      sla: stuck thresholds in seconds per state (RUNNING, STOPPING, PAUSED), over DEFAULT_SLA.
      states: the states to count (default DEFAULT_COUNTED_STATES).
      queues: RabbitMQ queues to report in addition to those the store knows of.
      clock: the wall clock for the scrape duration (injectable for tests).
    """

    def __init__(self, store: StateStore, *, broker_url: str | None = None, sla: Mapping[str, float] | None = None,
                 states: Iterable[JobStatus | str] | None = None, queues: Iterable[str] = (),
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.store = store
        self.broker_url = broker_url
        self._nodes = parse_url(broker_url) if broker_url else []  # a URL pika cannot parse fails here, once
        self.sla = _parse_sla(sla)
        self.states = frozenset(_S(s) for s in states) if states is not None else DEFAULT_COUNTED_STATES
        self._clock = clock
        self._lock = threading.Lock()
        self._errors: dict[str, int] = {"store": 0, "rabbitmq": 0}
        self._queues: set[str] = set(queues)  # every queue seen so far: a drained queue reports 0

    def describe(self) -> Iterable[Any]:
        """Nothing: the families are known only at collection, and describing must not query."""
        return []

    def collect(self) -> Iterator[Any]:
        """Query the store (and broker) once; yield every family. Scrapes are serialised."""
        with self._lock:
            families = self._collect()
        yield from families

    def _collect(self) -> list[Any]:
        started = self._clock()
        families: list[Any] = []
        try:
            families.extend(self._store_families())
        except Exception as exc:  # a scrape must answer even when the store does not
            self._errors["store"] += 1
            logger.warning("collector: store query failed: %s", exc)
        if self.broker_url:
            try:
                families.extend(self._broker_family())
            except Exception as exc:
                self._errors["rabbitmq"] += 1
                logger.warning("collector: RabbitMQ query failed: %s", explain(exc, self._nodes))
        errors = CounterMetricFamily("reliable_collector_errors", "Collector queries that failed, by source.",
                                     labels=["source"])
        for source, count in sorted(self._errors.items()):
            errors.add_metric([source], count)
        families.append(errors)
        took = GaugeMetricFamily("reliable_collector_scrape_seconds", "Duration of the last collection.")
        took.add_metric([], self._clock() - started)
        families.append(took)
        return families

    # -- store -----------------------------------------------------------------------------------

    def _store_families(self) -> list[Any]:
        read = read_gauges(self.store, states=self.states, sla=self.sla)
        counts = read.counts
        self._queues.update(queue for _, queue in (*counts, *read.stuck))
        # Every counted state of every known queue gets a sample, 0 when empty: absent series
        # would hide a drained queue and break `sum`/`or` in rules after an exporter restart.
        queues = sorted(self._queues)
        counted = sorted(s.value for s in self.states)
        by_state = GaugeMetricFamily("reliable_jobs", "Jobs in each state, by queue.", labels=["state", "queue"])
        for status in counted:
            for queue in queues:
                by_state.add_metric([status, queue], counts.get((status, queue), 0))
        families: list[Any] = [by_state]
        for state, name, doc in ((_S.DEAD, "reliable_dead_letter_jobs", "Jobs in DEAD (the dead letter)."),
                                 (_S.REVIEW, "reliable_review_jobs", "Jobs waiting for a person in REVIEW.")):
            if state not in self.states:
                continue
            family = GaugeMetricFamily(name, doc, labels=["queue"])
            for queue in queues:
                family.add_metric([queue], counts.get((state.value, queue), 0))
            families.append(family)

        # A timestamp has no neutral value (0 would read as a 56-year-old job): no PENDING job, no sample.
        oldest = GaugeMetricFamily("reliable_oldest_pending_timestamp_seconds",
                                   "scheduled_at (epoch s) of the oldest due PENDING job, by queue.",
                                   labels=["queue"])
        for queue, at in read.oldest_pending.items():
            if at is not None:
                oldest.add_metric([queue], float(at))
        families.append(oldest)

        stuck = GaugeMetricFamily("reliable_jobs_stuck", "Jobs in RUNNING, STOPPING or PAUSED past their SLA.",
                                  labels=["state", "queue"])
        for sla_state in sorted(st.value for st in self.sla):
            for queue in queues:
                stuck.add_metric([sla_state, queue], read.stuck.get((sla_state, queue), 0))
        families.append(stuck)
        families.append(_workflow_family(read))
        families.extend(_schedule_families(read))
        families.extend(_limit_families(read))
        processes = GaugeMetricFamily("reliable_worker_processes",
                                      "Worker processes on record and live (a heartbeat in the last 2 min), by host "
                                      "and queue.", labels=["host", "queue"])
        for (host, queue), count in sorted(live_by_host_and_queue(self.store).items()):
            processes.add_metric([host, queue], count)
            if queue != "*":  # the broker's consumers of it are read too
                self._queues.add(queue)
        families.append(processes)
        families.extend(self._pause_families())  # issue 28 (c28-queues)
        return families

    def _pause_families(self) -> list[Any]:
        """Per queue: 1 while an operator keeps it paused (0 for every other known queue), and since when."""
        state = paused(self.store)
        self._queues.update(state.names)
        flag = GaugeMetricFamily("reliable_queue_paused", "1 while an operator keeps the queue paused "
                                 "(`reliable queues pause`): its deliveries wait, no attempt runs.", labels=["queue"])
        since = GaugeMetricFamily("reliable_queue_paused_since_timestamp_seconds",
                                  "When (epoch s) each paused queue was paused.", labels=["queue"])
        for queue in sorted(self._queues):
            pause = state.get(queue)
            flag.add_metric([queue], 0 if pause is None else 1)
            if pause is not None:
                since.add_metric([queue], pause.paused_at)
        return [flag, since]

    # -- RabbitMQ --------------------------------------------------------------------------------

    def _broker_family(self) -> list[GaugeMetricFamily]:
        nodes = self._nodes
        family = GaugeMetricFamily("reliable_rabbitmq_queue_messages",
                                   "Messages ready in each RabbitMQ queue (passive queue_declare).",
                                   labels=["queue"])
        consumers = GaugeMetricFamily("reliable_rabbitmq_queue_consumers",
                                      "Consumers of each RabbitMQ queue (passive queue_declare).", labels=["queue"])
        for queue, depth in broker_depths(nodes, sorted(self._queues)).items():
            for name, messages in ((queue, depth.ready), (f"{queue}.DQ", depth.delayed), (f"{queue}.XQ", depth.dead)):
                if messages is not None:
                    family.add_metric([name], messages)
            if depth.ready is not None:
                consumers.add_metric([queue], depth.consumers)
        return [family, consumers]


@dataclass(frozen=True)
class BrokerDepth:
    """One queue in RabbitMQ: messages ready in it, in its delay queue (.DQ) and its dead-letter
    queue (.XQ), None for one that does not exist; consumers of the queue itself."""

    ready: int | None
    delayed: int | None
    dead: int | None
    consumers: int


def broker_depths(nodes: list[Any], queues: Iterable[str]) -> dict[str, BrokerDepth]:
    """Per queue of `queues` that exists in RabbitMQ (or whose .DQ / .XQ does), its depths, by passive
    declarations (nothing is created). `nodes`: pika connection parameters, tried in turn, each
    once, with a bounded timeout. Raises pika's errors when no node answers."""
    import pika
    from pika.exceptions import ChannelClosedByBroker

    nodes = [copy.copy(params) for params in nodes]  # a broker's own parameters keep their timeouts
    for params in nodes:  # a cluster's nodes are tried in turn, each once, bounded
        params.socket_timeout = _BROKER_TIMEOUT
        params.blocked_connection_timeout = _BROKER_TIMEOUT
        params.stack_timeout = _BROKER_TIMEOUT
        params.connection_attempts = 1
    depths: dict[str, BrokerDepth] = {}
    connection = pika.BlockingConnection(nodes)
    try:
        channel = connection.channel()
        for queue in queues:
            found: list[tuple[int, int] | None] = []
            for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
                try:
                    ok = channel.queue_declare(queue=name, passive=True)
                except ChannelClosedByBroker:  # no such queue: the broker closed the channel
                    channel = connection.channel()
                    found.append(None)
                    continue
                found.append((ok.method.message_count, ok.method.consumer_count))
            if any(found):
                main, delayed, dead = found
                depths[queue] = BrokerDepth(main and main[0], delayed and delayed[0], dead and dead[0],
                                            main[1] if main else 0)
    finally:
        if connection.is_open:
            connection.close()
    return depths


def _workflow_family(read: GaugeReadings) -> GaugeMetricFamily:
    """Workflows in each status someone may act on (final ones grow without bound: not counted)."""
    family = GaugeMetricFamily("reliable_workflows", "Workflows in each unfinished status.", labels=["status"])
    for status, n in read.workflows.items():
        family.add_metric([status], n)
    return family


def _schedule_families(read: GaugeReadings) -> list[Any]:
    """Per schedule, as timestamps: its next slot (schedules not paused) and the last slot it fired."""
    next_slot = GaugeMetricFamily("reliable_schedule_next_slot_timestamp_seconds",
                                  "The next slot (epoch s) of each schedule not paused; past it by more than "
                                  "the misfire grace: no scheduler is firing it.", labels=["schedule"])
    last_slot = GaugeMetricFamily("reliable_schedule_last_slot_timestamp_seconds",
                                  "The last slot (epoch s) each schedule fired.", labels=["schedule"])
    conflicts = CounterMetricFamily("reliable_schedule_slot_conflicts",
                                    "Slots not fired because their job id was held by another job (a message "
                                    "sent ahead under it): each is a slot_conflict event.", labels=["schedule"])
    for each in read.schedules:
        if not each.paused and each.next_slot is not None:
            next_slot.add_metric([each.name], each.next_slot)
        if each.last_slot is not None:
            last_slot.add_metric([each.name], each.last_slot)
        conflicts.add_metric([each.name], each.slot_conflicts)
    return [next_slot, last_slot, conflicts]


def _limit_families(read: GaugeReadings) -> list[Any]:
    """Per actor with a concurrency limit (reliable.limits): its effective and declared concurrency."""
    effective = GaugeMetricFamily("reliable_concurrency_limit",
                                  "The concurrency an actor may use now across all workers (lowered under "
                                  "sustained rate limiting).", labels=["actor"])
    declared = GaugeMetricFamily("reliable_concurrency_limit_declared",
                                 "The concurrency limit an actor declares.", labels=["actor"])
    for actor, now_limit, declared_limit in read.limits:
        effective.add_metric([actor], now_limit)
        declared.add_metric([actor], declared_limit)
    return [effective, declared]
