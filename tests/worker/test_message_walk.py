"""A message's walk through the worker's modules (docs/architecture.md, "A message's walk"): the
middleware hands each hook to a step built with the few collaborators it uses, and every call goes
down from there. None climbs back into a module that called it: a step never reads the middleware.

A climb back: a call from module B into module A while A is below B on the call stack. A callback
handed down (a lambda or a nested function, e.g. the write a store retry runs) runs as part of the
module that made it; a call from Dramatiq (a hook emitted by `broker.enqueue`) starts a new walk.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from dramatiq import Worker
from dramatiq.broker import MessageProxy
from dramatiq.brokers.stub import StubBroker

import reliable
from reliable.states import JobStatus
from reliable.store import StateStore

WORKER = Path(reliable.__file__).parent / "worker"


class Walk:
    """The reliable modules a piece of code visits, in order, and its climbs back."""

    def __init__(self) -> None:
        self.visited: list[str] = []
        self.climbs: list[str] = []
        # Per frame: its logical stack of reliable modules, and whether it is reliable's own.
        self._stack: list[tuple[tuple[str, ...], bool]] = [((), False)]

    def _profile(self, frame: Any, event: str, arg: Any) -> None:
        if event == "return":
            if len(self._stack) > 1:
                self._stack.pop()
            return
        if event != "call":
            return
        parent, parent_ours = self._stack[-1]
        name = frame.f_globals.get("__name__", "")
        if not name.startswith("reliable"):
            self._stack.append((parent, False))
            return
        code = frame.f_code
        if not parent_ours and parent:  # called from Dramatiq (a hook an enqueue emits): a new walk
            logical: tuple[str, ...] = (name,)
        elif code.co_name == "<lambda>" or "<locals>" in code.co_qualname:  # runs as part of its maker
            at = max((i for i, module in enumerate(parent) if module == name), default=-1)
            logical = parent[:at + 1] if at >= 0 else (*parent, name)
        else:
            if parent and name != parent[-1] and name in parent:
                self.climbs.append(f"{parent[-1]} -> {name}.{code.co_name}")
            logical = (*parent, name)
        if name not in self.visited:
            self.visited.append(name)
        self._stack.append((logical, True))

    def run(self, call: Callable[[], None]) -> None:
        """Run `call`, recording its walk."""
        sys.setprofile(self._profile)
        try:
            call()
        finally:
            sys.setprofile(None)


@pytest.fixture
def booted(tmp_path: Path) -> Iterator[tuple[StubBroker, Any, Worker]]:
    url = f"sqlite:///{tmp_path / 'walk.db'}"
    StateStore(url).upgrade()
    broker = StubBroker()
    broker.emit_after("process_boot")
    dramatiq.set_broker(broker)
    middleware = reliable.install(broker, store=url, recovery=False, metrics=False, json_logs=False)
    worker = Worker(broker, worker_threads=1)
    middleware.before_worker_boot(broker, worker)
    yield broker, middleware, worker
    middleware.before_worker_shutdown(broker, worker)
    middleware.after_worker_shutdown(broker, worker)
    broker.close()
    middleware.store.close()


def _delivered(message: dramatiq.Message[Any]) -> Any:
    """`message` as a worker thread gets it from its consumer."""
    return MessageProxy(message)


@pytest.mark.parametrize("fast_path", [False, True], ids=["durable", "fast path"])
def test_a_success_walks_down_the_steps_and_never_climbs_back(booted: tuple[StubBroker, Any, Worker],
                                                              fast_path: bool) -> None:
    broker, middleware, _ = booted

    @dramatiq.actor(fast_path=fast_path)
    def work(n: int) -> int:
        return n

    message = _delivered(work.send(1))
    walk = Walk()

    def deliver() -> None:
        middleware.before_process_message(broker, message)
        middleware.after_process_message(broker, message, result=1)

    walk.run(deliver)
    assert walk.climbs == []
    steps = [module.removeprefix("reliable.worker.") for module in walk.visited if module.startswith("reliable.worker")]
    assert steps[0] == "middleware"
    assert steps.index("claim") < steps.index("attempt")
    assert ("fast" in steps) is fast_path and ("heartbeat" in steps) is not fast_path  # no lease on the fast path
    assert middleware.store.get(message.message_id).status is JobStatus.SUCCEEDED


def test_a_failure_and_a_skip_never_climb_back(booted: tuple[StubBroker, Any, Worker]) -> None:
    broker, middleware, _ = booted

    @dramatiq.actor
    def broken(n: int) -> None:
        raise ValueError(n)

    failed, skipped = _delivered(broken.send(1)), _delivered(broken.send(2))
    walk = Walk()

    def deliver() -> None:
        middleware.before_process_message(broker, failed)
        middleware.after_process_message(broker, failed, exception=ValueError(1))
        try:  # another middleware's skip, after reliable's claim
            middleware.before_process_message(broker, skipped)
            raise dramatiq.middleware.SkipMessage("not today")
        except dramatiq.middleware.SkipMessage:
            middleware.after_skip_message(broker, skipped)

    walk.run(deliver)
    assert walk.climbs == []
    assert middleware.store.get(failed.message_id).status is JobStatus.FAILED  # the default policy decided
    assert middleware.store.get(skipped.message_id).status is JobStatus.CANCELLED


def test_no_step_module_reads_the_middleware() -> None:
    """Only the middleware (and `install`, which builds it) names it: a step gets its collaborators."""
    for path in sorted(WORKER.glob("*.py")):
        if path.name in ("middleware.py", "install.py"):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module is not None:
                assert not node.module.endswith("middleware") or node.level == 0, f"{path.name} imports the middleware"
            if isinstance(node, ast.arg):
                assert node.arg != "mw", f"{path.name}: a step handed the middleware ({node.arg})"
            if isinstance(node, ast.Name):
                assert node.id != "ReliableMiddleware", f"{path.name} names ReliableMiddleware"
