"""Group commit without a database: batching, one job per batch, errors to callers, and the lead
passing from thread to thread (interrupted leaders and waiters included)."""

from __future__ import annotations

import contextlib
import random
import sys
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from dramatiq.middleware import raise_thread_exception

from reliable.errors import LeaseLostInterrupt, StoreUnavailable
from reliable.states import Event
from reliable.store.batching import GroupCommit, _Pending
from reliable.store.writes import JobWrite, transition_write

from support import wait_for


def _write(job_id: str) -> JobWrite:
    return transition_write(job_id, Event.SUCCEED, lease_id=1, worker_id="w")


class FakeStore:
    """Answers each write with its job id; the first single write waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batches: list[list[str]] = []

        self.threads: list[int] = []  # the thread that ran each batch

    def many(self, writes: Sequence[JobWrite]) -> list[Any]:
        self.batches.append([w.job_id for w in writes])
        self.threads.append(threading.get_ident())
        return [({"job_id": w.job_id}, {}) for w in writes]

    def one(self, write: JobWrite) -> Any:
        self.release.wait(10)
        self.batches.append([write.job_id])
        self.threads.append(threading.get_ident())
        return ({"job_id": write.job_id}, {})


def _call(group: GroupCommit, job_id: str, answers: dict[str, Any],
          idents: dict[str, int] | None = None) -> threading.Thread:
    def run() -> None:
        if idents is not None:
            idents[job_id] = threading.get_ident()
        try:
            answers[job_id] = group.write(_write(job_id))
        except BaseException as exc:
            answers[job_id] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _join(threads: list[threading.Thread]) -> None:
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads), "a write was left waiting"


def test_a_lone_write_runs_its_batch_in_its_own_thread() -> None:
    store = FakeStore()
    store.release.set()
    group = GroupCommit(store.many, store.one)
    before = threading.active_count()
    result = group.write(_write("alone"))
    assert result is not None and result[0]["job_id"] == "alone"
    assert store.threads == [threading.get_ident()] and threading.active_count() == before
    assert group._leader is None and group._queue == []


def test_the_lead_passes_to_the_oldest_waiting_write_whose_write_heads_the_next_batch() -> None:
    store = FakeStore()
    group = GroupCommit(store.many, store.one)
    answers: dict[str, Any] = {}
    idents: dict[str, int] = {}
    threads = [_call(group, "first", answers, idents)]
    wait_for(lambda: group.batches == 1, "the first batch")
    threads.append(_call(group, "a", answers, idents))
    wait_for(lambda: len(group._queue) == 1, "a waiting")
    threads.append(_call(group, "b", answers, idents))
    wait_for(lambda: len(group._queue) == 2, "b waiting")
    store.release.set()
    _join(threads)
    assert store.batches == [["first"], ["a", "b"]]
    assert store.threads == [idents["first"], idents["a"]], "each batch ran in its leader's own thread"
    assert group._leader is None and group._queue == []


def test_the_leader_keeps_leading_until_its_own_write_is_answered() -> None:
    """Its write behind a second write of a job and a full batch: two batches, both its own."""
    store = FakeStore()
    store.release.set()
    group = GroupCommit(store.many, store.one, max_batch=2)
    queued = [_Pending(_write(j)) for j in ("a", "b", "a")]
    own = queued[2]
    group._queue, group._leader = list(queued), own
    group._lead(own)
    assert store.batches == [["a", "b"], ["a"]]
    assert all(p.answered and p.error is None for p in queued)
    assert group._leader is None and group._queue == []


def test_writes_gather_while_a_batch_is_in_flight_and_a_job_appears_once_per_batch() -> None:
    store = FakeStore()
    group = GroupCommit(store.many, store.one)
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 1, "the first flush")
    threads += [_call(group, job_id, answers) for job_id in ("a", "b", "a", "c")]
    wait_for(lambda: len(group._queue) == 4, "four waiting writes")
    store.release.set()
    _join(threads)
    assert store.batches[0] == ["first"]
    assert store.batches[1] == ["a", "b", "c"], "the second write of 'a' waits for the next batch"
    assert store.batches[2] == ["a"]
    assert all(answers[j][0]["job_id"] == j for j in ("first", "a", "b", "c"))


def test_max_batch_bounds_a_statement() -> None:
    store = FakeStore()
    group = GroupCommit(store.many, store.one, max_batch=2)
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 1, "the first flush")
    threads += [_call(group, f"j{i}", answers) for i in range(5)]
    wait_for(lambda: len(group._queue) == 5, "five waiting writes")
    store.release.set()
    for thread in threads:
        thread.join(10)
    assert [len(b) for b in store.batches[1:]] == [2, 2, 1]


def test_an_unexpected_flusher_error_reaches_every_caller_instead_of_a_hang() -> None:
    def wrong_length(writes: Sequence[JobWrite]) -> list[Any]:
        return []

    store = FakeStore()
    group = GroupCommit(wrong_length, store.one)
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 1, "the first flush")
    threads += [_call(group, job_id, answers) for job_id in ("a", "b")]
    wait_for(lambda: len(group._queue) == 2, "two waiting writes")
    store.release.set()
    for thread in threads:
        thread.join(10)
    assert not any(t.is_alive() for t in threads)
    assert isinstance(answers["a"], ValueError) and isinstance(answers["b"], ValueError)
    later = group.write(_write("later"))  # the flusher keeps serving
    assert later is not None and later[0]["job_id"] == "later"


def test_a_single_write_error_is_the_callers() -> None:
    def failing(write: JobWrite) -> Any:
        raise RuntimeError("boom")

    group = GroupCommit(lambda writes: [], failing)
    with pytest.raises(RuntimeError, match="boom"):
        group.write(_write("x"))


class Gate:
    """Holds a batch in Python code (so an asynchronous exception reaches its thread) until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        self.thread = 0

    def hold(self) -> None:
        self.thread = threading.get_ident()
        self.entered.set()
        while not self.opened.wait(0.01):  # bytecode between the waits: an interrupt can land
            pass


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_interrupted_leader_raises_in_its_own_thread_and_its_batch_goes_to_the_next_leader(where: str) -> None:
    """A lost-lease interrupt lands in the leader while its batch executes (before or after the
    statement ran): only the leader gets it; the others' writes are run again by the next leader."""
    store = FakeStore()
    gate = Gate()

    def many(writes: Sequence[JobWrite]) -> list[Any]:
        if gate.entered.is_set():
            return store.many(writes)
        if where == "before":
            gate.hold()
        results = store.many(writes)
        if where == "after":
            gate.hold()
        return results

    group = GroupCommit(many, store.one)
    answers: dict[str, Any] = {}
    idents: dict[str, int] = {}
    threads = [_call(group, "first", answers, idents)]
    wait_for(lambda: group.batches == 1, "the first batch")
    threads += [_call(group, j, answers, idents) for j in ("a", "b", "c")]
    wait_for(lambda: len(group._queue) == 3, "three waiting writes")
    store.release.set()
    gate.entered.wait(10)
    interrupted = next(j for j, ident in idents.items() if ident == gate.thread)
    raise_thread_exception(gate.thread, LeaseLostInterrupt)
    threads.append(_call(group, "d", answers, idents))  # arrives while the leader is interrupted
    gate.opened.set()
    _join(threads)
    assert isinstance(answers[interrupted], LeaseLostInterrupt)
    others = {"a", "b", "c", "d"} - {interrupted}
    assert all(answers[j][0]["job_id"] == j for j in others), answers
    ran_again = [j for batch in store.batches[1 if where == "before" else 2:] for j in batch]
    assert interrupted not in ran_again and sorted(ran_again) == sorted(others)
    assert group._leader is None and group._queue == []
    assert group.write(_write("later"))[0]["job_id"] == "later"  # type: ignore[index]


def test_an_interrupt_in_the_row_by_row_fallback_is_the_leaders_alone() -> None:
    store = FakeStore()
    gate = Gate()
    group = GroupCommit(lambda writes: (_ for _ in ()).throw(RuntimeError("bad row")), store.one)

    def one(write: JobWrite) -> Any:
        if write.job_id != "first" and not gate.entered.is_set():
            gate.hold()
        return store.one(write)

    group._write_one = one  # type: ignore[method-assign]
    answers: dict[str, Any] = {}
    idents: dict[str, int] = {}
    threads = [_call(group, "first", answers, idents)]
    wait_for(lambda: group.batches == 1, "the first batch")
    threads += [_call(group, j, answers, idents) for j in ("a", "b")]
    wait_for(lambda: len(group._queue) == 2, "two waiting writes")
    store.release.set()
    gate.entered.wait(10)
    raise_thread_exception(gate.thread, KeyboardInterrupt)
    gate.opened.set()
    _join(threads)
    interrupted = next(j for j, ident in idents.items() if ident == gate.thread)
    assert isinstance(answers[interrupted], KeyboardInterrupt)
    other = ({"a", "b"} - {interrupted}).pop()
    assert answers[other][0]["job_id"] == other


def test_a_waiter_handed_the_lead_as_it_stops_waiting_passes_it_on() -> None:
    """A thread that leaves on an exception (a KeyboardInterrupt out of its wait, say) just as it
    is handed the lead: the lead goes to the next waiting write, nobody is left waiting."""
    store = FakeStore()
    store.release.set()
    group = GroupCommit(store.many, store.one)
    leaving, staying = _Pending(_write("leaving")), _Pending(_write("staying"))
    group._queue, group._leader = [leaving, staying], leaving  # as just handed to `leaving`
    group._step_down(leaving)
    assert group._leader is staying and group._queue == [staying]
    assert not staying.wait(), "woken to lead, not answered"
    group._lead(staying)
    assert staying.outcome()[0]["job_id"] == "staying"  # type: ignore[index]
    assert group._leader is None and group._queue == []


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Switch threads every 10 us instead of 5 ms: far more interleavings of the hand-over."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(interval)


class ChaosStore:
    """Answers each write with its own token; some batches fail (a bad row, a lost connection), some
    single writes fail, and some batches are interrupted in their leader's thread (seeded)."""

    def __init__(self, seed: int) -> None:
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.running = 0
        self.sizes: list[int] = []
        self.interrupts = 0

    def _enter(self, writes: Sequence[JobWrite]) -> float:
        with self.lock:
            self.running += 1
            assert self.running == 1, "two batches ran at once"
            assert len({w.job_id for w in writes}) == len(writes), "a job twice in one statement"
            self.sizes.append(len(writes))
            return self.random.random()

    def _leave(self) -> None:
        with self.lock:
            self.running -= 1

    def many(self, writes: Sequence[JobWrite]) -> list[Any]:
        roll = self._enter(writes)
        try:
            if roll < 0.05:
                raise StoreUnavailable("connection lost")
            if roll < 0.10:
                raise RuntimeError("a bad row")
            if roll < 0.13:
                self.interrupts += 1
                raise KeyboardInterrupt  # as if delivered to the leader's thread
            return [({"token": w.attempt_id}, {}) for w in writes]
        finally:
            self._leave()

    def one(self, write: JobWrite) -> Any:
        roll = self._enter([write])
        try:
            if roll < 0.05:
                raise ValueError(f"bad {write.attempt_id}")
            return ({"token": write.attempt_id}, {})
        finally:
            self._leave()


@pytest.mark.parametrize("seed", range(6))
def test_many_threads_with_shared_jobs_errors_and_interrupted_leaders(seed: int, fast_switching: None) -> None:
    """Seeded stress of the hand-over: 16 threads x 40 writes over 12 job ids (so a job is often
    pending twice), max_batch 5. Every write gets its own answer or an error meant for it, no two
    batches run at once, no statement holds a job twice, and nobody is left waiting."""
    store = ChaosStore(seed)
    group = GroupCommit(store.many, store.one, max_batch=5)
    outcomes: dict[str, str] = {}

    def worker(n: int) -> None:
        rng = random.Random(seed * 100 + n)
        for i in range(40):
            token = f"{n}-{i}"
            write = transition_write(f"job{rng.randrange(12)}", Event.CLAIM, worker_id="w", attempt_id=token,
                                     lease_ttl=60.0)
            try:
                result = group.write(write)
            except (StoreUnavailable, RuntimeError, ValueError):
                outcomes[token] = "error"
            except KeyboardInterrupt:
                outcomes[token] = "interrupted"
            else:
                assert result is not None and result[0]["token"] == token, "another write's answer"
                outcomes[token] = "ok"

    threads = [threading.Thread(target=worker, args=(n,), name=f"writer-{n}") for n in range(16)]
    for thread in threads:
        thread.start()
    _join(threads)
    assert len(outcomes) == 16 * 40
    assert max(store.sizes) <= 5
    assert sum(1 for o in outcomes.values() if o == "interrupted") == store.interrupts, "an interrupt went astray"
    assert group._leader is None and group._queue == [] and store.running == 0


def test_write_all_rides_in_one_batch_and_its_riders_never_take_the_lead() -> None:
    """A claim with its claims ahead (`write_all`): the riders go in the owner's batch or in none (a
    job already in the batch, a full batch: answered with an error at once), and the lead never
    passes to a rider (no thread waits on one)."""
    store = FakeStore()
    group = GroupCommit(store.many, store.one, max_batch=3)
    answers: dict[str, Any] = {}
    first = _call(group, "first", answers)  # leads, its single write held until released
    wait_for(lambda: group._leader is not None, "the first write leading")
    queued = _call(group, "dup", answers)  # waits in the queue
    wait_for(lambda: len(group._queue) == 1, "the second write queued")
    results: list[Any] = []
    owner = threading.Thread(target=lambda: results.extend(group.write_all(
        [_write("own"), _write("dup"), _write("a"), _write("b")])))
    owner.start()
    wait_for(lambda: len(group._queue) == 2, "write_all's own write queued (its riders with it)")
    assert all(not p.rider for p in group._queue)
    store.release.set()
    _join([first, queued, owner])
    assert store.batches[0] == ["first"]
    # "dup" (queued first) heads the next batch; the owner's "dup" rider is left out, "a" fits, "b" does not.
    assert store.batches[1] == ["dup", "own", "a"]
    assert [r[0]["job_id"] if isinstance(r, tuple) else type(r) for r in results] == [
        "own", StoreUnavailable, "a", StoreUnavailable]
    assert group._leader is None and group._queue == []


class _Interrupt(BaseException):
    """Stands for an asynchronous exception (a time limit) landing in the leader."""


def test_an_interrupted_leaders_riders_are_never_written_later() -> None:
    """write_all's leader interrupted during its batch: the batch goes back to the queue, but its
    riders (claims ahead nobody will hold) leave it; the next leader writes only the others."""
    written: list[str] = []
    boom = [True]

    def many(writes: Sequence[JobWrite]) -> list[Any]:
        if boom[0]:
            boom[0] = False
            raise _Interrupt()
        written.extend(w.job_id for w in writes)
        return [({"job_id": w.job_id}, {}) for w in writes]

    def one(write: JobWrite) -> Any:
        written.append(write.job_id)
        return ({"job_id": write.job_id}, {})

    group = GroupCommit(many, one)
    with pytest.raises(_Interrupt):
        group.write_all([_write("own"), _write("ahead-1"), _write("ahead-2")])
    assert group._queue == [] and group._leader is None
    group.write(_write("other"))
    assert written == ["other"]


def test_a_rider_left_out_is_answered_once_whatever_the_takes() -> None:
    group = GroupCommit(lambda ws: [({"job_id": w.job_id}, {}) for w in ws], lambda w: ({"job_id": w.job_id}, {}))
    first, owner = _Pending(_write("a")), _Pending(_write("b"))
    owner.riders = [_Pending(_write("a"), rider=True), _Pending(_write("c"), rider=True)]
    group._queue = [first, owner]
    assert [p.write.job_id for p in group._take()] == ["a", "b", "c"]
    assert owner.riders[0].answered and isinstance(owner.riders[0].error, StoreUnavailable)
    group._queue = [owner]  # as if put back by an interrupted leader
    assert [p.write.job_id for p in group._take()] == ["b"]  # boarded once: no second answer, no error


class Submitted:
    """The answers of submitted writes (`GroupCommit.submit`), with the thread each came in."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.threads: dict[str, str] = {}
        self.lock = threading.Lock()

    def done(self, job_id: str) -> Any:
        def answered(result: Any, error: BaseException | None) -> None:
            with self.lock:
                self.answers[job_id] = error if error is not None else result
                self.threads[job_id] = threading.current_thread().name
        return answered


def test_a_lone_submitted_write_runs_its_batch_in_its_own_thread_and_its_callback_in_another() -> None:
    """Its batch runs in the submitting thread (a lone write leads); its callback runs in the
    callbacks thread, which no asynchronous exception of a worker thread reaches."""
    store = FakeStore()
    store.release.set()
    group = GroupCommit(store.many, store.one)
    submitted = Submitted()
    group.submit(_write("alone"), submitted.done("alone"))
    assert store.threads == [threading.get_ident()]
    wait_for(lambda: "alone" in submitted.answers, "the callback")
    assert submitted.answers["alone"][0]["job_id"] == "alone"
    assert submitted.threads["alone"] == "reliable-group-commit-callbacks"
    assert group._leader is None and group._queue == [] and group._flusher is None


def test_submitted_writes_left_by_a_leader_are_led_by_the_flusher_thread() -> None:
    """Writes submitted during a batch: the leader answers its own and steps down; nobody waits on
    the others, so the flusher thread leads them (a write that waits joins its batch), then leaves
    the lead free for the next write."""
    store = FakeStore()
    group = GroupCommit(store.many, store.one)
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 1, "the first batch")
    submitted = Submitted()
    for job_id in ("a", "b"):
        group.submit(_write(job_id), submitted.done(job_id))  # returns at once: a batch is under way
    assert submitted.answers == {} and len(group._queue) == 2
    store.release.set()
    _join(threads)
    wait_for(lambda: len(submitted.answers) == 2, "the submitted writes answered")
    assert answers["first"][0]["job_id"] == "first"
    assert {j: a[0]["job_id"] for j, a in submitted.answers.items()} == {"a": "a", "b": "b"}
    assert set(submitted.threads.values()) == {"reliable-group-commit"}
    assert store.batches == [["first"], ["a", "b"]]
    wait_for(lambda: group._leader is None, "the lead left free")
    assert group._queue == []
    assert group.write(_write("later"))[0]["job_id"] == "later"  # type: ignore[index]
    assert store.threads[-1] == threading.get_ident(), "the next lone write leads again itself"


def test_a_waiting_write_that_joins_the_flushers_queue_is_answered_by_it() -> None:
    store = FakeStore()
    group = GroupCommit(store.many, store.one)
    flushing = threading.Event()
    proceed = threading.Event()
    many = store.many

    def slow_many(writes: Sequence[JobWrite]) -> list[Any]:
        if threading.current_thread().name == "reliable-group-commit" and not flushing.is_set():
            flushing.set()
            proceed.wait(10)
        return many(writes)

    group._write_many = slow_many  # type: ignore[method-assign]
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 1, "the first batch")
    submitted = Submitted()
    for job_id in ("a", "b"):
        group.submit(_write(job_id), submitted.done(job_id))
    store.release.set()
    assert flushing.wait(10)  # the flusher runs a batch of a and b: a write arriving now waits in its queue
    threads.append(_call(group, "waits", answers))
    wait_for(lambda: len(group._queue) == 1, "the waiting write queued")
    proceed.set()
    _join(threads)
    assert answers["waits"][0]["job_id"] == "waits"
    assert store.batches[-1] == ["waits"] and store.threads[-1] == group._flusher.ident  # type: ignore[union-attr]


def test_a_failing_callback_does_not_keep_the_batch_from_its_other_answers(caplog: pytest.LogCaptureFixture) -> None:
    store = FakeStore()
    group = GroupCommit(store.many, store.one)
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 1, "the first batch")

    def broken(result: Any, error: BaseException | None) -> None:
        raise RuntimeError("callback bug")

    submitted = Submitted()
    group.submit(_write("broken"), broken)
    group.submit(_write("fine"), submitted.done("fine"))
    threads.append(_call(group, "waits", answers))
    wait_for(lambda: len(group._queue) == 3, "three queued")
    store.release.set()
    _join(threads)
    wait_for(lambda: "fine" in submitted.answers, "the other submitted write answered")
    assert answers["waits"][0]["job_id"] == "waits"
    assert "the callback of job broken's write failed" in caplog.text


def test_a_submitted_write_whose_batch_fails_gets_the_error() -> None:
    group = GroupCommit(lambda writes: [], lambda write: (_ for _ in ()).throw(StoreUnavailable("down")))
    submitted = Submitted()
    group.submit(_write("x"), submitted.done("x"))
    wait_for(lambda: "x" in submitted.answers, "the callback")
    assert isinstance(submitted.answers["x"], StoreUnavailable)
    assert group._leader is None and group._queue == []


def test_an_interrupted_leader_hands_over_the_callbacks_it_had_answered_but_not_run() -> None:
    """The leader answered its batch's submitted writes, then an asynchronous exception stopped it
    before their callbacks were handed over: stepping down hands them over (each runs once)."""
    store = FakeStore()
    group = GroupCommit(store.many, store.one)
    submitted = Submitted()
    own = _Pending(_write("own"))
    answered = [_Pending(_write(j), rider=True, done=submitted.done(j)) for j in ("a", "b")]
    for pending in answered:
        pending.answer(({"job_id": pending.write.job_id}, {}))
    group._leader, group._batch = own, [own, *answered]
    group._step_down(own)
    wait_for(lambda: len(submitted.answers) == 2, "both callbacks")
    assert {j: a[0]["job_id"] for j, a in submitted.answers.items()} == {"a": "a", "b": "b"}
    group._dispatch(answered[0])  # handed over twice (a repair racing the batch's own): still run once
    for pending in answered:
        pending.call()
    assert len(submitted.answers) == 2 and group._leader is None


def test_a_submitted_write_of_an_interrupted_submitter_is_still_written_and_answered() -> None:
    """The submitting thread led the batch and was interrupted while it ran: its write goes back
    to the queue, the next leader (here the flusher) writes it and its callback runs."""
    store = FakeStore()
    gate = Gate()
    calls = []

    def many(writes: Sequence[JobWrite]) -> list[Any]:
        return store.many(writes)

    def one(write: JobWrite) -> Any:
        calls.append(write.job_id)
        if len(calls) == 1:
            gate.hold()
        return store.one(write)

    store.release.set()
    group = GroupCommit(many, one)
    submitted = Submitted()
    outcome: list[BaseException] = []

    def submit() -> None:
        try:
            group.submit(_write("mine"), submitted.done("mine"))
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=submit)
    thread.start()
    gate.entered.wait(10)
    raise_thread_exception(gate.thread, LeaseLostInterrupt)
    gate.opened.set()
    thread.join(10)
    assert outcome and isinstance(outcome[0], LeaseLostInterrupt)
    wait_for(lambda: "mine" in submitted.answers, "the write answered after all")
    assert submitted.answers["mine"][0]["job_id"] == "mine"
    wait_for(lambda: group._leader is None, "the lead left free")


def test_a_submitted_write_queued_by_an_interrupted_thread_before_it_could_lead_is_led_by_the_flusher() -> None:
    store = FakeStore()
    store.release.set()
    group = GroupCommit(store.many, store.one)
    submitted = Submitted()
    queued = _Pending(_write("queued"), rider=True, done=submitted.done("queued"))
    group._queue = [queued]  # appended, then the exception landed before `_leader` was set
    group._step_down(queued)
    wait_for(lambda: "queued" in submitted.answers, "the write answered")
    assert submitted.answers["queued"][0]["job_id"] == "queued"
    wait_for(lambda: group._leader is None, "the lead left free")


def test_a_write_given_up_in_the_batch_under_way_is_never_handed_the_lead() -> None:
    """A send timed out while its write was in the batch under way, then that batch's leader was
    interrupted: the lead went to the write whose thread had left, and every later write waited for ever."""

    class Interrupted(BaseException):
        """Stands for an asynchronous exception in the leader (a time limit, LeaseLostInterrupt)."""

    first_done, batch_may_end = threading.Event(), threading.Event()

    def many(writes: Sequence[JobWrite]) -> list[Any]:
        batch_may_end.wait(10)
        raise Interrupted()

    def one(write: JobWrite) -> Any:
        if write.job_id == "first":
            first_done.wait(10)
        return ({"job_id": write.job_id}, {})

    group: GroupCommit[JobWrite, Any] = GroupCommit(many, one)
    answers: dict[str, Any] = {}

    def run(job_id: str, timeout: float | None = None) -> threading.Thread:
        def call() -> None:
            try:
                answers[job_id] = group.write(_write(job_id), timeout=timeout)
            except BaseException as exc:
                answers[job_id] = exc

        thread = threading.Thread(target=call, daemon=True)
        thread.start()
        return thread

    run("first")  # leads a lone write, held until released
    wait_for(lambda: group._leader is not None and group._queue == [], "the first write to lead")
    run("leader")
    wait_for(lambda: [p.write.job_id for p in group._queue] == ["leader"], "the second write queued")
    run("sender", timeout=0.5)
    wait_for(lambda: [p.write.job_id for p in group._queue] == ["leader", "sender"], "the sender queued")
    first_done.set()  # "leader" now leads one batch of itself and "sender"
    wait_for(lambda: sorted(p.write.job_id for p in group._batch) == ["leader", "sender"], "the batch under way")
    wait_for(lambda: "sender" in answers, "the sender to give up", timeout=10)
    assert isinstance(answers["sender"], StoreUnavailable) and "may still commit" in str(answers["sender"])
    batch_may_end.set()  # the leader is interrupted with the batch unanswered
    wait_for(lambda: "leader" in answers, "the interrupted leader to return")
    assert isinstance(answers["leader"], Interrupted)
    later = run("later")
    wait_for(lambda: "later" in answers, "a later write to be answered", timeout=10)
    later.join(5)
    assert answers["later"] == ({"job_id": "later"}, {})


def _raising_scope() -> Iterator[None]:
    """A callbacks scope that raises as it closes (it must not: e.g. a thread that cannot start)."""
    yield
    raise RuntimeError("can't start new thread")


def test_a_raising_callbacks_scope_neither_kills_the_callbacks_thread_nor_the_flusher(
        caplog: pytest.LogCaptureFixture) -> None:
    """The callbacks of later batches still run, in the callbacks thread and in the flusher, and
    the flusher still leaves the lead free: the next write is not kept waiting for ever."""
    store = FakeStore()
    store.release.set()
    group = GroupCommit(store.many, store.one)
    group.callbacks_scope = contextlib.contextmanager(_raising_scope)
    submitted = Submitted()
    for job_id in ("a", "b"):  # lone submitted writes: their callbacks run in the callbacks thread
        group.submit(_write(job_id), submitted.done(job_id))
        wait_for(lambda: job_id in submitted.answers, f"{job_id}'s callback")  # noqa: B023
    assert set(submitted.threads.values()) == {"reliable-group-commit-callbacks"}
    assert "group commit: the scope of 1 callbacks failed" in caplog.text
    store.release.clear()
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 3, "a batch in flight")
    for job_id in ("c", "d"):  # led by the flusher, which runs their callbacks itself
        group.submit(_write(job_id), submitted.done(job_id))
    store.release.set()
    _join(threads)
    wait_for(lambda: {"c", "d"} <= submitted.answers.keys(), "the flusher's callbacks")
    assert submitted.threads["c"] == "reliable-group-commit"
    wait_for(lambda: group._leader is None, "the lead left free")
    assert group.write(_write("later"))[0]["job_id"] == "later"  # type: ignore[index]
