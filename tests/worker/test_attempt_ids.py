"""Attempt ids: 32 hex digits, unique within a process, across threads and across a fork."""

from __future__ import annotations

import os
import re
import threading

from reliable.worker.leases import new_attempt_id


def test_attempt_ids_are_32_hex_digits_and_unique_across_threads() -> None:
    ids: list[list[str]] = [[] for _ in range(8)]

    def draw(mine: list[str]) -> None:
        mine.extend(new_attempt_id() for _ in range(5_000))

    threads = [threading.Thread(target=draw, args=(mine,)) for mine in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    drawn = [attempt for mine in ids for attempt in mine]
    assert len(set(drawn)) == len(drawn) == 40_000
    assert all(re.fullmatch(r"[0-9a-f]{32}", attempt) for attempt in drawn)


def test_a_forked_child_draws_ids_the_parent_never_draws() -> None:
    before = new_attempt_id()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its ids and exit without running pytest's teardown
        os.close(read)
        os.write(write, " ".join(new_attempt_id() for _ in range(100)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = set(pipe.read().split())
    os.waitpid(pid, 0)
    parent = {before, *(new_attempt_id() for _ in range(100))}
    assert len(child) == 100 and not child & parent
    assert {attempt[:16] for attempt in child}.isdisjoint({attempt[:16] for attempt in parent})
