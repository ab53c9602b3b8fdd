"""Claims ahead: a worker thread's claim also claims the durable messages waiting in the process.

Dramatiq's worker prefetches messages into its `work_queue` (reliable.worker.waiting reads it, on
the verified Dramatiq versions only). When a thread claims its delivery's job, the same
group-commit batch also claims the jobs of the waiting messages whose own claim would be
straightforward (`select`, with the rule of `claim.AheadRule`): at most as many as the process
has worker threads, counting the claims already held ahead. When such a message's thread reaches
its claim, it takes the claim held for it (`take`) instead of writing again.

The rules:
- A claim ahead is an ordinary claim (same guard, the delivery's digest included): one refused is
  dropped, and the delivery's own claim later decides and handles the refusal as it always did.
- While it waits, its lease is renewed by the heartbeat like a running attempt's. A lease lost
  meanwhile (reassigned, or unrenewed for a TTL) is marked on its attempt: the run never starts
  (`JobContext.enter` refuses it, `Leases.start` skips the delivery as a refused claim's).
- A claim not taken within `KEEP_FOR` seconds (its message skipped or requeued, lost) is handed
  back (`StateStore.return_claim`: RUNNING -> PENDING, `claim_returned`, no attempt spent), looked
  for at each claim of the process and at each pass of its recovery loop; at the worker's shutdown
  every untaken one is (Dramatiq requeues the waiting messages in Worker.stop). A hand-back that
  loses (the job was asked to stop, a pause stands) leaves the lease to expire: recovery ends it
  as any other.
- A thread whose delivery is being claimed ahead by another thread's batch waits for that batch's
  answer (`take`), so it never claims a job its own process holds.
- A worker killed with claims held ahead leaves them RUNNING with leases nobody renews: recovery
  expires them as any other, as crashed attempts (nothing tells a claim held ahead from a run).
  So only jobs whose crash is retried (`retry_on_crash`, by default the idempotent ones) are
  claimed ahead: a job that a crash would send to REVIEW is never claimed before its run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Container, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..store import Claim
from .context import JobContext
from .gates import Gate

__all__ = ["KEEP_FOR", "Ahead", "ClaimsAhead", "select"]

#: How long, in seconds, a claim ahead waits for its message's thread before it is handed back.
KEEP_FOR = 10.0


@dataclass(frozen=True)
class Ahead:
    """A claim held ahead for a waiting message: its claim, its running attempt (in the heartbeat),
    the digest of the delivery it was claimed for, and when (monotonic clock)."""

    claim: Claim
    context: JobContext
    digest: str | None
    at: float


def select(messages: Iterable[Any], *, own_id: str, held: Container[str],
           digest: Callable[[Any], str | None], limit: int) -> list[tuple[Any, str]]:
    """The (message, delivery digest) to claim ahead among the waiting `messages`, next first: those
    `digest` accepts (None: not to be claimed ahead), neither the delivery's own nor held already,
    each job once, at most `limit`. Pure."""
    chosen: list[tuple[Any, str]] = []
    seen = {own_id}
    for message in messages:
        if len(chosen) >= limit:
            break
        job_id = message.message_id
        if job_id in seen or job_id in held:
            continue
        seen.add(job_id)  # a duplicate delivery of a job is its own claim's business
        accepted = digest(message)
        if accepted is not None:
            chosen.append((message, accepted))
    return chosen


class ClaimsAhead:
    """This process's claims held ahead (see the module doc). Off (`enabled` False) until `watch`
    names the waiting messages at the worker's boot."""

    def __init__(self, *, keep_for: float = KEEP_FOR, clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = False
        #: Set by `drain`: the worker is stopping, no claim is taken ahead any more.
        self.stopping = False
        self.limit = 0
        #: Claims taken ahead, taken by their thread, handed back (logged at the worker's shutdown).
        self.claimed = self.taken = self.handed_back = 0
        self._waiting: Callable[[], list[Any]] = list
        self._keep_for, self._clock = keep_for, clock
        self._held: dict[str, Ahead] = {}
        #: The jobs whose claim or hand-back is being written, each with its gate (opened when the
        #: write ends: only the threads waiting for that job wake, one after the other).
        self._in_flight: dict[str, Gate] = {}
        #: How many times a delivery's thread waited for a write in flight.
        self.waits = 0
        #: The jobs a delivery's thread is claiming itself (`take` found nothing held), until `claimed`.
        self._own: dict[str, int] = {}
        self._lock = threading.Lock()

    def watch(self, waiting: Callable[[], list[Any]], limit: int) -> None:
        """Claim ahead over `waiting()` (the waiting messages, next first), at most `limit` held."""
        self._waiting, self.limit, self.enabled = waiting, limit, limit > 0

    def pick(self, own_id: str, digest: Callable[[Any], str | None]) -> list[tuple[Any, str]]:
        """The claims to take ahead with `own_id`'s claim (`select` over the waiting messages, room
        permitting), marked in flight until `settle`."""
        if not self.enabled or self.stopping:
            return []
        messages = self._waiting()
        with self._lock:
            room = self.limit - len(self._held) - len(self._in_flight)
            if room <= 0 or not messages:
                return []
            busy = self._held.keys() | self._in_flight.keys() | self._own.keys()
        chosen = select(messages, own_id=own_id, held=busy, digest=digest, limit=room)
        with self._lock:
            busy = self._held.keys() | self._in_flight.keys() | self._own.keys()  # picked or taken meanwhile
            chosen = [(m, d) for m, d in chosen if m.message_id not in busy]
            for message, _ in chosen:
                self._in_flight[message.message_id] = Gate()
        return chosen

    def settle(self, picked: Sequence[tuple[Any, str]], won: dict[str, Ahead]) -> None:
        """The batch of `picked` answered: hold the claims that won (`won`), wake their threads."""
        with self._lock:
            self._held.update(won)
            self.claimed += len(won)
            ended = [self._in_flight.pop(m.message_id) for m, _ in picked]
        for gate in ended:
            gate.open()

    def take(self, job_id: str, digest: str | None, *, claiming: bool = True) -> Ahead | None:
        """The claim held ahead for this delivery (used up), waiting while one is in flight; None
        when there is none, or it was claimed for a delivery with another digest (then it stays,
        until handed back). `claiming`: on None the delivery's thread claims the job itself, and
        `claimed_itself` must follow (a skipped delivery, which claims nothing, passes False)."""
        if not self.enabled:
            return None
        while True:
            with self._lock:
                writing = self._in_flight.get(job_id)
                if writing is None:
                    held = self._held.get(job_id)
                    if held is None or held.digest != digest:
                        if claiming:
                            # Its thread claims it itself: no other thread's batch may claim it ahead
                            # meanwhile (that claim would win and this delivery's be refused).
                            self._own[job_id] = self._own.get(job_id, 0) + 1
                        return None
                    del self._held[job_id]
                    self.taken += 1
                    return held
                self.waits += 1
            writing.wait()

    def claimed_itself(self, job_id: str) -> None:
        """The delivery's own claim of `job_id` (after `take` found nothing held) has ended."""
        if not self.enabled:
            return
        with self._lock:
            left = self._own.pop(job_id, 0) - 1
            if left > 0:
                self._own[job_id] = left

    def overdue(self) -> list[Ahead]:
        """The claims held longer than `keep_for`, to hand back: in flight until `returned` (a
        thread reaching its claim meanwhile waits, then claims from PENDING)."""
        with self._lock:
            if not self._held:
                return []
            now = self._clock()
            late = [a for a in self._held.values() if now - a.at > self._keep_for]
            for ahead in late:
                del self._held[ahead.context.job_id]
                self._in_flight[ahead.context.job_id] = Gate()
            return late

    def drain(self) -> list[Ahead]:
        """Every claim still held, to hand back (the worker is shutting down): in flight until
        `returned`; none is taken ahead from now on."""
        with self._lock:
            self.stopping = True
            held, self._held = list(self._held.values()), {}
            for ahead in held:
                self._in_flight[ahead.context.job_id] = Gate()
            return held

    def returned(self, job_id: str, *, written: bool) -> None:
        """The hand-back of `job_id`'s claim ended (`written`: committed); wake a thread waiting for it."""
        with self._lock:
            ended = self._in_flight.pop(job_id, None)
            self.handed_back += written
        if ended is not None:
            ended.open()

    def now(self) -> float:
        """The clock the claims are timed by."""
        return self._clock()

