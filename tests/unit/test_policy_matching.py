"""Classification: rule order, subclasses, messages, HTTP statuses, attributes, scopes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from reliable.policy import Policy
from reliable.policy.matching import http_status, normalize_exception_path, parse_statuses, truncate


class Response:
    """A minimal HTTP response: status and headers."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class HTTPError(Exception):
    """Like requests.HTTPError: the status is on `.response`."""

    def __init__(self, status: int, headers: dict[str, str] | None = None, message: str = "") -> None:
        super().__init__(message or f"HTTP {status}")
        self.response = Response(status, headers)


class StatusCodeError(Exception):
    """An SDK error with `.status_code`."""

    def __init__(self, status_code: int) -> None:
        super().__init__("sdk")
        self.status_code = status_code


class StatusError(Exception):
    """An aiohttp-style error with `.status`."""

    def __init__(self, status: int) -> None:
        super().__init__("aio")
        self.status = status


class PaymentError(Exception):
    """A base class in this test module."""

    def __init__(self, message: str = "", code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class CardDeclined(PaymentError):
    """A subclass: rules on PaymentError match it."""


HERE = __name__


def load(tmp_path: Path, text: str) -> Policy:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return Policy.load(path)


def classify(policy: Policy, exc: BaseException, actor: str = "a", queue: str = "q") -> tuple[str, str | None]:
    error_class, rule, _ = policy.classify(exc, actor, queue)
    return error_class, None if rule is None else rule.name


def test_first_match_wins(tmp_path: Path) -> None:
    policy = load(tmp_path, f"""
rules:
  - name: declined
    exception: {HERE}.CardDeclined
    class: invalid_input
  - name: payment
    exception: {HERE}.PaymentError
    class: side_effect_unknown
""")
    assert classify(policy, CardDeclined()) == ("invalid_input", "declined")
    assert classify(policy, PaymentError()) == ("side_effect_unknown", "payment")
    assert classify(policy, KeyError()) == ("transient", None)


def test_broader_rule_first_makes_the_narrow_one_unreachable_only_when_known(tmp_path: Path) -> None:
    # Without imports the loader cannot know CardDeclined subclasses PaymentError: both load, first wins.
    policy = load(tmp_path, f"""
rules:
  - {{name: payment, exception: {HERE}.PaymentError, class: side_effect_unknown}}
  - {{name: declined, exception: {HERE}.CardDeclined, class: invalid_input}}
""")
    assert classify(policy, CardDeclined()) == ("side_effect_unknown", "payment")


def test_subclasses_and_builtins(tmp_path: Path) -> None:
    policy = load(tmp_path, """
rules:
  - {name: os, exception: builtins.OSError, class: transient}
  - {name: lookup, exception: LookupError, class: invalid_input}
""")
    assert classify(policy, ConnectionResetError()) == ("transient", "os")
    assert classify(policy, KeyError("k")) == ("invalid_input", "lookup")
    assert classify(policy, IndexError()) == ("invalid_input", "lookup")
    assert classify(policy, ArithmeticError()) == ("transient", None)


def test_alias_paths_match_when_the_module_is_loaded(tmp_path: Path) -> None:
    policy = load(tmp_path, "rules:\n  - {name: t, exception: asyncio.TimeoutError, class: invalid_input}\n")
    assert asyncio.TimeoutError is TimeoutError
    assert classify(policy, TimeoutError()) == ("invalid_input", "t")


def test_message_pattern(tmp_path: Path) -> None:
    policy = load(tmp_path, """
rules:
  - {name: deadlock, exception: RuntimeError, message: "(?i)deadlock detected", class: transient}
  - {name: runtime, exception: RuntimeError, class: invalid_input}
""")
    assert classify(policy, RuntimeError("ERROR: Deadlock detected on row 5")) == ("transient", "deadlock")
    assert classify(policy, RuntimeError("other")) == ("invalid_input", "runtime")


def test_broken_str_does_not_break_matching(tmp_path: Path) -> None:
    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no")

    policy = load(tmp_path, "rules:\n  - {name: m, message: x, class: invalid_input}\n")
    assert classify(policy, Weird()) == ("transient", None)


@pytest.mark.parametrize(("exc", "status"), [
    (HTTPError(503), 503), (StatusCodeError(429), 429), (StatusError(404), 404), (ValueError(), None),
])
def test_http_status_sources(exc: BaseException, status: int | None) -> None:
    assert http_status(exc) == status


def test_httpx_status_error(tmp_path: Path) -> None:
    request = httpx.Request("GET", "https://api.example/x")
    exc = httpx.HTTPStatusError("boom", request=request, response=httpx.Response(502, request=request))
    policy = Policy.load(None)
    assert classify(policy, exc) == ("transient", "http-5xx")


@pytest.mark.parametrize(("status", "expected"), [
    (429, "rate_limited"), (401, "authorization"), (403, "authorization"), (400, "invalid_input"),
    (422, "invalid_input"), (500, "transient"), (599, "transient"),
    (404, "invalid_input"),  # no rule of the file: the built-in http-4xx

])
def test_status_rules(tmp_path: Path, status: int, expected: str) -> None:
    policy = load(tmp_path, """
rules:
  - {name: throttle, status: 429, class: rate_limited}
  - {name: auth, status: [401, "403"], class: authorization}
  - {name: input, status: ["400", "420-422"], class: invalid_input}
  - {name: server, status: 5xx, class: transient}
""")
    assert classify(policy, HTTPError(status))[0] == expected


def test_status_and_exception_must_both_hold(tmp_path: Path) -> None:
    policy = load(tmp_path, f"rules:\n  - {{name: s, exception: {HERE}.StatusCodeError, status: 409, class: dead}}\n"
                            "classes:\n  dead: {action: dead}\n")
    assert classify(policy, StatusCodeError(409)) == ("dead", "s")
    assert classify(policy, HTTPError(409))[1] != "s"
    assert classify(policy, StatusCodeError(410))[1] != "s"


def test_attribute_equality(tmp_path: Path) -> None:
    policy = load(tmp_path, f"""
rules:
  - name: declined
    exception: {HERE}.PaymentError
    attribute: {{code: card_declined}}
    class: invalid_input
  - name: nested
    attribute: {{response.status_code: 418}}
    class: authorization
""")
    assert classify(policy, CardDeclined(code="card_declined")) == ("invalid_input", "declined")
    assert classify(policy, CardDeclined(code="insufficient_funds"))[1] is None
    assert classify(policy, HTTPError(418)) == ("authorization", "nested")


def test_actor_then_queue_then_global_rules(tmp_path: Path) -> None:
    policy = load(tmp_path, """
rules:
  - {name: global, exception: TimeoutError, class: transient}
queues:
  payments:
    rules:
      - {name: queue, exception: TimeoutError, class: side_effect_unknown}
actors:
  charge:
    rules:
      - {name: actor, exception: TimeoutError, class: invalid_input}
""")
    assert classify(policy, TimeoutError(), "other", "default") == ("transient", "global")
    assert classify(policy, TimeoutError(), "other", "payments") == ("side_effect_unknown", "queue")
    assert classify(policy, TimeoutError(), "charge", "payments") == ("invalid_input", "actor")
    assert classify(policy, TimeoutError(), "charge", "default") == ("invalid_input", "actor")


def test_rule_label_names_file_line_and_rule(tmp_path: Path) -> None:
    policy = load(tmp_path, "version: 1\nrules:\n  - name: t\n    exception: TimeoutError\n    class: transient\n")
    _, _, label = policy.classify(TimeoutError(), "a", "q")
    assert label == f"{tmp_path / 'policy.yaml'}:3 (t)"


def test_status_parsing() -> None:
    assert parse_statuses("5xx") == frozenset(range(500, 600))
    assert parse_statuses([429, "503-504"]) == frozenset({429, 503, 504})
    for bad in ("6xx", 99, "abc", [], True, "504-503"):
        with pytest.raises(ValueError):
            parse_statuses(bad)


def test_path_normalisation_and_truncation() -> None:
    assert normalize_exception_path("TimeoutError") == "builtins.TimeoutError"
    assert normalize_exception_path("httpx.ReadTimeout") == "httpx.ReadTimeout"
    assert truncate("short") == "short"
    long = truncate("x" * 5000)
    assert len(long) <= 1000
    assert long.endswith("[truncated, 5000 chars]")
