"""Gate (reliable.worker.gates): every waiting thread blocks until the gate opens, then all pass."""

from __future__ import annotations

import threading

from reliable.worker.gates import Gate

from support import wait_for


def test_waiting_threads_pass_only_once_the_gate_opens_and_then_all_of_them() -> None:
    gate = Gate()
    passed: list[int] = []
    started = threading.Barrier(9)

    def waiter(n: int) -> None:
        started.wait()
        gate.wait()
        passed.append(n)

    threads = [threading.Thread(target=waiter, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    started.wait()
    threads[0].join(0.05)  # a closed gate holds them all (a correct gate can never fail this)
    assert all(thread.is_alive() for thread in threads) and passed == []
    gate.open()
    for thread in threads:
        thread.join(10)
    wait_for(lambda: sorted(passed) == list(range(8)), "every waiter through the open gate")
    gate.wait()  # an open gate does not block a later thread
