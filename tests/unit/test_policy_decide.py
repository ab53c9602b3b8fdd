"""Decisions: actions per class, attempts, rate limiting, retry budgets, crashes, contracts."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import dramatiq
import httpx
import pytest

from reliable.errors import PolicyError
from reliable.policy import Decision, Failure, JobContract, Policy, RetryBudget

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository
NOW = 1_800_000_000.0


class Response:
    """A minimal HTTP response."""

    def __init__(self, status_code: int, headers: dict[str, str] | None = None) -> None:
        self.status_code = status_code
        self.headers = headers or {}


class HTTPError(Exception):
    """An HTTP error with `.response`."""

    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.response = Response(status, headers)


def fail(policy: Policy, exc: BaseException, *, attempt: int = 1, actor: str = "a", queue: str = "q",
         contract: JobContract | None = None, **extra: object) -> Decision:
    contract = contract or policy.contract(actor, queue)
    failure = Failure(exception=exc, actor=actor, queue=queue, attempt=attempt, retry_count=attempt - 1,
                      contract=contract, now=NOW, rand=lambda: 0.5, **extra)  # type: ignore[arg-type]
    return policy.decide(failure)


@pytest.fixture
def default() -> Policy:
    return Policy.load(None)


@pytest.mark.parametrize(("exc", "action", "error_class", "alert"), [
    (TimeoutError(), "retry", "transient", False),
    (HTTPError(503), "retry", "transient", False),
    (HTTPError(429, {"Retry-After": "7"}), "retry", "rate_limited", False),
    (HTTPError(400), "fail", "invalid_input", False),
    (HTTPError(410), "fail", "invalid_input", False),  # any 4xx is permanent ...
    (HTTPError(404), "fail", "invalid_input", False),
    (HTTPError(418), "fail", "invalid_input", False),
    (HTTPError(408), "retry", "transient", False),  # ... but those that say "try again"
    (HTTPError(409), "retry", "transient", False),
    (HTTPError(425), "retry", "transient", False),
    (ValueError("bad"), "fail", "invalid_input", False),
    (HTTPError(401), "halt", "authorization", True),
    (PermissionError(), "halt", "authorization", True),
    (KeyError("x"), "retry", "transient", False),
])
def test_default_actions(default: Policy, exc: BaseException, action: str, error_class: str, alert: bool) -> None:
    decision = fail(default, exc)
    assert (decision.action, decision.error_class, decision.alert) == (action, error_class, alert)
    assert decision.reason
    json.dumps(decision.as_detail())


def test_side_effect_unknown_goes_to_review_never_retried(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("rules:\n  - {name: ambiguous, exception: TimeoutError, class: side_effect_unknown}\n")
    decision = fail(Policy.load(path), TimeoutError("read timed out"), attempt=1)
    assert decision.action == "review"
    assert decision.rule == f"{path}:2 (ambiguous)"
    assert decision.delay is None


def test_non_idempotent_default_class_is_review(default: Policy) -> None:
    contract = default.contract("charge", "payments", {"idempotent": False})
    assert fail(default, KeyError("x"), contract=contract).action == "review"
    assert fail(default, ConnectionRefusedError(), contract=contract).action == "retry"  # a rule said transient


def test_transient_backoff_then_dead(default: Policy) -> None:
    delays = [fail(default, TimeoutError(), attempt=n).delay for n in range(1, 5)]
    assert delays == [0.5, 1.0, 2.0, 4.0]  # rand 0.5 of base 1s * 2**n
    last = fail(default, TimeoutError(), attempt=5)
    assert last.action == "dead"
    assert "no attempts left" in last.reason


def test_decision_records_the_exception(default: Policy) -> None:
    decision = fail(default, ValueError("y" * 3000), attempt=2)
    detail = decision.as_detail()
    assert detail["exception_type"] == "builtins.ValueError"
    assert len(detail["message"]) <= 1000 and "truncated" in detail["message"]
    assert detail["rule"] == "<built-in> (bad-values)"
    assert (detail["attempt"], detail["retry_count"]) == (2, 1)


def test_dramatiq_retry_uses_its_delay(default: Policy) -> None:
    decision = fail(default, dramatiq.Retry("later", delay=2500))
    assert (decision.action, decision.error_class, decision.delay) == ("retry", "transient", 2.5)
    assert fail(default, dramatiq.Retry("later")).delay == 0.5  # no delay: backoff


def test_rate_limited_honours_retry_after_capped(default: Policy) -> None:
    assert fail(default, HTTPError(429, {"Retry-After": "42"})).delay == 42.0
    capped = fail(default, HTTPError(429, {"Retry-After": "99999"}))
    assert capped.delay == 600.0 and "capped" in capped.reason
    garbage = fail(default, HTTPError(429, {"Retry-After": "-3"}))
    assert garbage.action == "retry" and garbage.delay == 0.5  # fallback: backoff
    assert garbage.rate_limited


def test_rate_limited_does_not_count_toward_max_attempts(default: Policy) -> None:
    exc = HTTPError(429, {"Retry-After": "1"})
    decision = fail(default, exc, attempt=9, rate_limited_retries=8)
    assert decision.action == "retry" and decision.rate_limited
    # a plain failure after 8 rate-limited attempts is failure 2 of 5, not attempt 10
    assert fail(default, TimeoutError(), attempt=10, rate_limited_retries=8).action == "retry"
    assert fail(default, TimeoutError(), attempt=13, rate_limited_retries=8).action == "dead"


def test_rate_limited_cap_and_sustained_alert(default: Policy) -> None:
    exc = HTTPError(429, {"Retry-After": "1"})
    assert not fail(default, exc, rate_limited_retries=3).alert
    sustained = fail(default, exc, rate_limited_retries=4)  # the 5th in a row
    assert sustained.alert and "sustained" in sustained.reason
    over = fail(default, exc, rate_limited_retries=20)
    assert over.action == "dead" and over.alert and over.rate_limited


def test_retry_budget_delay_and_dead(default: Policy) -> None:
    contract = default.contract("a", "q")
    assert contract.retry_budget == RetryBudget(per_minute=600, on_exhausted="delay", delay=300.0)
    within = fail(default, TimeoutError(), recent_retries=599)
    assert not within.budget_exhausted
    delayed = fail(default, TimeoutError(), recent_retries=600)
    assert (delayed.action, delayed.delay, delayed.budget_exhausted, delayed.alert) == ("retry", 300.0, True, True)
    strict = replace(contract, retry_budget=RetryBudget(per_minute=10, on_exhausted="dead"))
    dead = fail(default, TimeoutError(), recent_retries=10, contract=strict)
    assert (dead.action, dead.budget_exhausted, dead.alert) == ("dead", True, True)
    unlimited = replace(contract, retry_budget=None)
    assert not fail(default, TimeoutError(), recent_retries=10**6, contract=unlimited).budget_exhausted


def test_user_defined_class(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("classes:\n  quota: {action: dead, alert: true}\n"
                    "rules:\n  - {name: q, message: quota, class: quota}\n")
    decision = fail(Policy.load(path), RuntimeError("monthly quota exceeded"))
    assert (decision.action, decision.error_class, decision.alert) == ("dead", "quota", True)


def test_crash_decisions(default: Policy) -> None:
    idempotent = default.contract("a", "q")
    assert default.decide_crash(contract=idempotent, attempt=1, actor="a", queue="q").action == "requeue"
    assert default.decide_crash(contract=idempotent, attempt=5, actor="a", queue="q").action == "dead"
    once = default.contract("a", "q", {"idempotent": False})
    assert once.retry_on_crash is False
    review = default.decide_crash(contract=once, attempt=1, actor="a", queue="q")
    assert (review.action, review.error_class) == ("review", "crash")
    allowed = default.contract("a", "q", {"idempotent": False, "retry_on_crash": True})
    assert default.decide_crash(contract=allowed, attempt=1, actor="a", queue="q").action == "requeue"
    backoff = replace(idempotent, on_crash="retry")
    retry = default.decide_crash(contract=backoff, attempt=2, actor="a", queue="q", rand=lambda: 0.5)
    assert (retry.action, retry.delay) == ("retry", 1.0)


def test_contract_precedence(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("""
defaults: {owner: platform, max_attempts: 4, stop_grace: 1m, backoff: {base: 2s}}
queues:
  payments: {idempotent: false, owner: payments-team, max_attempts: 3, sla: {running: 5m}}
actors:
  charge: {owner: charge-team, retry_on_crash: true, backoff: {cap: 30s}}
""")
    policy = Policy.load(path)
    plain = policy.contract("other", "default")
    assert (plain.owner, plain.max_attempts, plain.stop_grace, plain.idempotent) == ("platform", 4, 60.0, True)
    queue = policy.contract("other", "payments")
    assert (queue.owner, queue.max_attempts, queue.idempotent, queue.retry_on_crash) == \
        ("payments-team", 3, False, False)
    assert queue.sla_running == 300.0
    actor = policy.contract("charge", "payments")
    assert (actor.owner, actor.retry_on_crash) == ("charge-team", True)
    assert (actor.backoff.base, actor.backoff.cap) == (2.0, 30.0)
    options = policy.contract("charge", "payments", {
        "owner": "me", "max_retries": 0, "stop_grace": "10s", "resumable": True, "checkpoint_schema": 3,
        "compensation": "refund", "min_backoff": 500, "max_backoff": 5000, "time_limit": 1000,
    })
    assert (options.owner, options.max_attempts, options.stop_grace, options.resumable) == ("me", 1, 10.0, True)
    assert (options.checkpoint_schema, options.compensation) == (3, "refund")
    assert (options.backoff.base, options.backoff.cap) == (0.5, 5.0)


def test_bad_actor_option_is_a_policy_error(default: Policy) -> None:
    with pytest.raises(PolicyError, match="actor 'a' option max_retries"):
        default.contract("a", "q", {"max_retries": -2})
    with pytest.raises(PolicyError, match="option idempotent"):
        default.contract("a", "q", {"idempotent": "no"})


def name(decision: Decision) -> str | None:
    """The rule's name without its file and line (those differ between built-in and file)."""
    return decision.rule.rsplit(" ", 1)[-1] if decision.rule else None


def httpx_error(status: int, retry_after: str | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://api.example/v1")
    headers = {"Retry-After": retry_after} if retry_after else {}
    return httpx.HTTPStatusError("err", request=request, response=httpx.Response(status, headers=headers,
                                                                                  request=request))


TABLE: list[BaseException] = [
    TimeoutError(), ConnectionRefusedError(), PermissionError(), ValueError(), TypeError(), KeyError("k"),
    RuntimeError(), dramatiq.Retry(delay=100), httpx.ConnectTimeout("t"), httpx.ReadError("r"),
    *(httpx_error(s) for s in (400, 401, 403, 404, 409, 422, 500, 502, 503)), httpx_error(429, "12"),
    HTTPError(429), HTTPError(418), Exception("plain"),
]


@pytest.mark.parametrize("attempt", [1, 3, 5])
@pytest.mark.parametrize("options", [{}, {"idempotent": False}])
def test_shipped_default_yaml_equals_builtin(attempt: int, options: dict[str, object]) -> None:
    builtin, shipped = Policy.load(None), Policy.load(SHIPPED / "policies/builtin/default.yaml")
    assert builtin.lease == shipped.lease
    assert builtin.classes == shipped.classes
    contract = builtin.contract("a", "q", options)
    assert contract == shipped.contract("a", "q", options)
    for exc in TABLE:
        ours, theirs = fail(builtin, exc, attempt=attempt, contract=contract), \
            fail(shipped, exc, attempt=attempt, contract=contract)
        assert (ours.action, ours.error_class, ours.delay, ours.alert, name(ours)) == \
            (theirs.action, theirs.error_class, theirs.delay, theirs.alert, name(theirs)), exc
    for n in (1, 5):
        assert builtin.decide_crash(contract=contract, attempt=n, actor="a", queue="q") == \
            shipped.decide_crash(contract=contract, attempt=n, actor="a", queue="q")


def test_example_http_policy() -> None:
    policy = Policy.load(SHIPPED / "policies/examples/http_api.yaml")
    throttled = fail(policy, httpx_error(503, "30"))
    assert (throttled.action, throttled.delay) == ("retry", 30.0)
    assert fail(policy, httpx_error(422)).action == "fail"
    assert fail(policy, httpx_error(401)).action == "halt"
    assert fail(policy, httpx.ReadTimeout("r")).action == "retry"
    assert fail(policy, httpx.ReadTimeout("r"), queue="payments").action == "review"
    assert fail(policy, httpx.ConnectError("c"), queue="payments").action == "retry"
    assert fail(policy, RuntimeError("?"), queue="payments").action == "review"
    payments = policy.contract("charge_card", "payments")
    assert (payments.idempotent, payments.owner, payments.compensation) == (False, "team-payments", "refund_charge")
    assert policy.decide_crash(contract=payments, attempt=1, actor="charge_card", queue="payments").action == "review"
