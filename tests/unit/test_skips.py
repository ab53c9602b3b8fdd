"""Who skipped a delivery, and how its job ends (reliable.worker.skips): no broker, no store."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from dramatiq.middleware import Middleware, SkipMessage
from dramatiq_abort import Abort

from reliable.states import Event
from reliable.worker.skips import UNKNOWN_MIDDLEWARE, Skip, aborted_by, skip_of


class Outer(Middleware):
    def before_process_message(self, broker: Any, message: Any) -> None:
        Inner().before_process_message(broker, message)


class Inner(Middleware):
    def before_process_message(self, broker: Any, message: Any) -> None:
        _helper()


def _helper() -> None:
    raise SkipMessage("seen before")


def _caught(call: Any) -> BaseException:
    try:
        call()
    except SkipMessage as exc:
        return exc
    raise AssertionError("no SkipMessage")


def _message(failed: bool = False) -> Any:
    return SimpleNamespace(failed=failed, message_id="m1")


def test_the_innermost_middleware_is_named_with_its_reason() -> None:
    exc = _caught(lambda: Outer().before_process_message(None, None))
    skip = skip_of(_message(), exc, Middleware(), marked_own=False)
    assert skip == Skip("Inner", "seen before", failed=False, own=False)
    assert skip.event is Event.SKIPPED and skip.detail() == {"middleware": "Inner", "reason": "seen before"}


def test_a_failed_message_ends_failed() -> None:
    exc = _caught(lambda: Inner().before_process_message(None, None))
    assert skip_of(_message(failed=True), exc, Middleware(), marked_own=False).event is Event.SKIPPED_FAILED


def test_a_skip_no_middleware_raised_names_an_unknown_one() -> None:
    exc = _caught(_helper)  # an actor's own SkipMessage
    assert skip_of(_message(), exc, Middleware(), marked_own=False).middleware == UNKNOWN_MIDDLEWARE
    assert skip_of(_message(), None, Middleware(), marked_own=False) == Skip(UNKNOWN_MIDDLEWARE, None, False, False)


@pytest.mark.parametrize("marked", [False, True])
def test_reliables_own_skip_is_recognised_by_its_mark_or_its_frame(marked: bool) -> None:
    reliable = Inner()
    exc = _caught(lambda: reliable.before_process_message(None, None))
    assert skip_of(_message(), exc, reliable, marked_own=marked).own
    other = _caught(lambda: Inner().before_process_message(None, None))
    assert skip_of(_message(), other, reliable, marked_own=marked).own is marked


def test_aborted_by_names_dramatiq_aborts_interrupt_and_its_subclasses() -> None:
    class Sub(Abort):
        pass

    assert aborted_by(Abort()) == aborted_by(Sub()) == "Abortable"
    assert aborted_by(RuntimeError()) is None and aborted_by(None) is None
