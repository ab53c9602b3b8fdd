"""The group-commit flusher without a database: batching, one job per batch, errors to callers."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from reliable.states import Event
from reliable.store.batching import GroupCommit
from reliable.store.writes import JobWrite, transition_write

from support import wait_for


def _write(job_id: str) -> JobWrite:
    return transition_write(job_id, Event.SUCCEED, lease_id=1, worker_id="w")


class FakeStore:
    """Answers each write with its job id; the first single write waits until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.batches: list[list[str]] = []

    def many(self, writes: Sequence[JobWrite]) -> list[Any]:
        self.batches.append([w.job_id for w in writes])
        return [({"job_id": w.job_id}, {}) for w in writes]

    def one(self, write: JobWrite) -> Any:
        self.release.wait(10)
        self.batches.append([write.job_id])
        return ({"job_id": write.job_id}, {})


def _call(group: GroupCommit, job_id: str, answers: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        try:
            answers[job_id] = group.write(_write(job_id))
        except BaseException as exc:
            answers[job_id] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_writes_gather_while_a_batch_is_in_flight_and_a_job_appears_once_per_batch() -> None:
    store = FakeStore()
    group = GroupCommit(store.many, store.one)
    answers: dict[str, Any] = {}
    threads = [_call(group, "first", answers)]
    wait_for(lambda: group.batches == 1, "the first flush")
    threads += [_call(group, job_id, answers) for job_id in ("a", "b", "a", "c")]
    wait_for(lambda: len(group._queue) == 4, "four waiting writes")
    store.release.set()
    for thread in threads:
        thread.join(10)
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
