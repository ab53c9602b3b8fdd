"""Deadlines on a silent network: the watchdog cuts a socket still waiting at its call's deadline, and
the heartbeat gives up (interrupts, logs, records once the store answers) leases it could not renew
for a TTL. No service: a socket pair, an injected clock and a store that fails on demand."""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import pytest

from reliable.deadlines import Watchdog, cut_socket, deadline, remaining, within
from reliable.errors import LeaseLostInterrupt, StoreUnavailable
from reliable.states import JobStatus
from reliable.store import Claim
from reliable.store.records import LeaseStatus
from reliable.testing import wait_for
from reliable.worker.context import JobContext
from reliable.worker.heartbeat import MIN_RENEWAL_BOUND, Heartbeat, renewal_bound


def test_an_inner_deadline_never_extends_the_outer_one() -> None:
    assert deadline() is None and remaining() is None
    with within(1.0) as outer:
        with within(60.0) as inner:
            assert inner == outer
        with within(0.01) as sooner:
            assert sooner < outer
        assert deadline() == outer
    assert deadline() is None


def test_the_watchdog_cuts_a_waiting_socket_at_its_deadline_and_spares_one_given_back() -> None:
    cuts: list[object] = []
    watchdog = Watchdog(tick=0.01, on_cut=lambda key, _late: cuts.append(key))
    waiting, peer = socket.socketpair()
    spared, spared_peer = socket.socketpair()
    try:
        watchdog.arm("spared", time.monotonic() + 0.05, lambda: cut_socket(spared.fileno()))
        watchdog.disarm("spared")  # its call ended in time
        watchdog.arm("waiting", time.monotonic() + 0.05, lambda: cut_socket(waiting.fileno()))
        waiting.settimeout(10)
        started = time.monotonic()
        assert waiting.recv(16) == b""  # the silent read ends at the deadline, as end-of-stream
        assert time.monotonic() - started < 5
        wait_for(lambda: cuts == ["waiting"], "the cut to be reported")
        assert watchdog.armed() == 0
        spared_peer.sendall(b"alive")
        assert spared.recv(16) == b"alive"
    finally:
        for sock in (waiting, peer, spared, spared_peer):
            sock.close()


@dataclass
class FakeJob:
    """What the heartbeat asks of a running attempt."""

    job_id: str
    fencing_token: int = 1
    lease_lost: bool = False
    interrupts: list[type[BaseException]] = field(default_factory=list)

    def lease_matters(self) -> bool:
        return not self.lease_lost

    def lose_lease(self) -> bool:
        lost, self.lease_lost = self.lease_lost, True
        return not lost

    def mark_lease_lost(self) -> None:
        self.lease_lost = True

    def interrupt(self, exc: type[BaseException]) -> None:
        self.interrupts.append(exc)

    def observe(self, _lease: Any) -> None:
        pass


@dataclass
class FlakyStore:
    """A store whose renewals fail while `down`, recording the events it is asked to write."""

    down: bool = False
    events: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def renew(self, _worker_id: str, leases: list[tuple[str, int]], lease_ttl: float) -> dict[str, LeaseStatus]:
        if self.down:
            raise StoreUnavailable("cannot use the store at postgresql://db:5432/jobs: server closed the connection")
        return {job_id: LeaseStatus(job_id, lease, JobStatus.RUNNING, False, False, False, 100.0 + lease_ttl, None)
                for job_id, lease in leases}

    def process_beat(self, _worker_id: str) -> None:
        if self.down:
            raise StoreUnavailable("down")

    def record_event(self, job_id: str, event: str, **fields: Any) -> None:
        if self.down:
            raise StoreUnavailable("down")
        self.events.append((job_id, event, fields))


def test_a_job_whose_lease_went_unrenewed_for_a_ttl_is_interrupted_and_its_history_says_why(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    store = FlakyStore()
    heartbeat = Heartbeat(cast(Any, store), worker_id="w", interval=1.0, lease_ttl=4.0,
                          where="postgresql://db:5432/jobs", clock=lambda: now[0])
    job = FakeJob("j1")
    heartbeat.add(cast(Any, job))
    heartbeat.beat_once()  # renewed at 0
    store.down = True
    with caplog.at_level(logging.WARNING, logger="reliable.leases"):
        for now[0] in (1.0, 2.0, 3.0, 3.9):
            heartbeat.beat_once()
        assert job.interrupts == []  # not yet a full TTL
        assert "heartbeat failed: the store at postgresql://db:5432/jobs did not renew the leases" in caplog.text
        now[0] = 4.0
        heartbeat.beat_once()
    assert job.interrupts == [LeaseLostInterrupt] and job.lease_lost
    assert "job j1: lease 1 not renewed for 4.0s" in caplog.text and "being handed on" in caplog.text
    now[0] = 5.0
    heartbeat.beat_once()
    assert job.interrupts == [LeaseLostInterrupt]  # once
    assert store.events == []
    store.down = False
    now[0] = 6.0
    heartbeat.beat_once()  # the store answers: the interruption is recorded on the job
    [(job_id, event, fields)] = store.events
    assert (job_id, event, fields["lease_id"]) == ("j1", "lease_unrenewed", 1)
    assert "handed on" in fields["reason"] and fields["detail"] == {"unrenewed_for": 4.0}


def test_a_claim_not_run_yet_whose_lease_went_unrenewed_for_a_ttl_never_starts() -> None:
    """A claim held ahead (reliable.worker.ahead) waits for its thread: once the heartbeat gave its
    lease up, its run must not start (`enter` refuses), while one that ran and returned is left be."""
    now = [0.0]
    store = FlakyStore()
    heartbeat = Heartbeat(cast(Any, store), worker_id="w", interval=1.0, lease_ttl=4.0, clock=lambda: now[0])
    waiting, returned = attempt("ahead", 1), attempt("done", 2)
    assert returned.enter()
    returned.leave()  # its actor returned: it is committing its outcome
    for job in (waiting, returned):
        heartbeat.add(job)
    store.down = True
    now[0] = 4.0
    heartbeat.beat_once()
    assert waiting.lease_lost and not returned.lease_lost
    assert not waiting.enter()  # never started
    store.down = False
    now[0] = 5.0
    heartbeat.beat_once()
    assert [(job_id, event) for job_id, event, _ in store.events] == [("ahead", "lease_unrenewed")]


def attempt(job_id: str, lease_id: int) -> JobContext:
    """A real attempt of a won claim, not started (the heartbeat only renews and marks it)."""
    won = Claim(cast(Any, SimpleNamespace(job_id=job_id, checkpoint=None, lease_id=lease_id,
                                          attempt_id=f"{job_id}-attempt")))
    return JobContext(cast(Any, None), won, cast(Any, None), worker_id="w", lease_ttl=4.0)


def test_a_renewal_is_bounded_by_one_interval_and_never_less_than_the_floor() -> None:
    assert renewal_bound(10.0) == 10.0
    assert renewal_bound(0.2) == MIN_RENEWAL_BOUND
