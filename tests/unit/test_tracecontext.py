"""W3C traceparent parsing and generation, and the trace id mapping (reliable.tracecontext)."""

from __future__ import annotations

import logging
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable.tracecontext import TraceParent, new_span_id, new_trace_id, span_id_for, trace_id_from

HEX = "0123456789abcdef"
trace_ids = st.text(HEX, min_size=32, max_size=32).filter(lambda t: t != "0" * 32)
span_ids = st.text(HEX, min_size=16, max_size=16).filter(lambda s: s != "0" * 16)
W3C = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]")


@given(trace_ids, span_ids, st.booleans())
def test_format_then_parse_round_trips(trace_id: str, span_id: str, sampled: bool) -> None:
    trace = TraceParent(trace_id, span_id, sampled)
    assert W3C.fullmatch(str(trace))
    assert TraceParent.parse(str(trace)) == trace


@given(st.text(max_size=80))
def test_parse_never_raises_and_accepts_only_the_format(text: str) -> None:
    parsed = TraceParent.parse(text)
    assert parsed is None or W3C.fullmatch(str(parsed))


def test_the_spec_examples() -> None:
    parsed = TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
    assert parsed == TraceParent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", True)
    assert TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00") == TraceParent(
        "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", False)
    # A later version may append fields; its known fields are read.
    assert TraceParent.parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra") == parsed


@pytest.mark.parametrize("text", [
    "00-00000000000000000000000000000000-00f067aa0ba902b7-01",  # all-zero trace id
    "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",  # all-zero span id
    "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  # version ff is forbidden
    "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",  # version 00 has no more fields
    "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",  # upper case
    "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",  # short trace id
    "4bf92f3577b34da6a3ce929d0e0e4736", "", None, 42, ["00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"],
])
def test_invalid_traceparents(text: object) -> None:
    assert TraceParent.parse(text) is None


def test_an_invalid_option_is_ignored_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="reliable.tracecontext"):
        assert TraceParent.from_options({"traceparent": "00-nope"}, job_id="j1") is None
    assert "message j1: option traceparent '00-nope' is not a valid W3C traceparent; ignored" in caplog.text
    caplog.clear()
    assert TraceParent.from_options({}, job_id="j1") is None and caplog.text == ""


def test_new_ids_are_random_and_valid() -> None:
    traces = {new_trace_id() for _ in range(200)}
    spans = {new_span_id() for _ in range(200)}
    assert len(traces) == 200 and len(spans) == 200
    assert all(TraceParent.parse(f"00-{t}-{s}-01") for t, s in zip(traces, spans, strict=True))


@given(st.text(min_size=1, max_size=100))
def test_span_id_for_an_attempt_is_stable_and_valid(attempt_id: str) -> None:
    span = span_id_for(attempt_id)
    assert span == span_id_for(attempt_id) and re.fullmatch(r"[0-9a-f]{16}", span) and span != "0" * 16


def test_trace_id_from_keeps_w3c_ids_and_maps_other_text() -> None:
    assert trace_id_from("4BF92F3577B34DA6A3CE929D0E0E4736") == "4bf92f3577b34da6a3ce929d0e0e4736"
    mapped = trace_id_from("request-123")
    assert re.fullmatch(r"[0-9a-f]{32}", mapped) and mapped == trace_id_from(" request-123 ")
    assert mapped != trace_id_from("request-124")
    assert trace_id_from("0" * 32) != "0" * 32  # the invalid id is text like any other


def test_child_keeps_the_trace_with_a_new_span() -> None:
    parent = TraceParent(new_trace_id(), new_span_id(), False)
    child = parent.child()
    assert child.trace_id == parent.trace_id and child.span_id != parent.span_id and not child.sampled
    assert parent.child("00f067aa0ba902b7").span_id == "00f067aa0ba902b7"


def test_for_message_chooses_one_trace() -> None:
    sender = TraceParent(new_trace_id(), new_span_id())
    given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    assert TraceParent.for_message({"traceparent": given, "trace_id": "x"}, sender=sender) == TraceParent.parse(given)
    assert TraceParent.for_message({"trace_id": sender.trace_id.upper()}, sender=sender) == sender
    mapped = TraceParent.for_message({"trace_id": "request-123"}, sender=sender)
    assert mapped.trace_id == trace_id_from("request-123") and mapped.span_id != sender.span_id
    assert TraceParent.for_message({"trace_id": 7}, sender=sender) == sender  # not text: not a trace id
    assert TraceParent.for_message({"traceparent": "bad"}, sender=sender) == sender
    fresh = TraceParent.for_message({})
    assert W3C.fullmatch(str(fresh)) and fresh != TraceParent.for_message({})


def test_a_new_trace_reads_the_random_source_once_and_never_keeps_a_zero_id(monkeypatch: pytest.MonkeyPatch) -> None:
    import secrets

    reads: list[int] = []
    answers = iter(["0" * 32 + "a" * 16, "b" * 32 + "0" * 16, "c" * 32 + "d" * 16])

    def token_hex(nbytes: int) -> str:
        reads.append(nbytes)
        return next(answers)

    monkeypatch.setattr(secrets, "token_hex", token_hex)
    assert TraceParent.for_message({}) == TraceParent("c" * 32, "d" * 16)
    assert reads == [24, 24, 24]  # one read per try: both ids from it, a zero id refused
