"""Policy files extend the built-in policy; `inherit: false` drops it; ambiguous errors of non-idempotent jobs."""

from __future__ import annotations

import http.client
from pathlib import Path

import dramatiq
import httpx
import pytest
from dramatiq.middleware.time_limit import TimeLimitExceeded

from reliable.errors import PolicyError
from reliable.policy import Decision, Failure, JobContract, Policy
from reliable.policy.check import check_path
from reliable.policy.defaults import AMBIGUOUS_RULE, BUILTIN_PATH
from reliable.policy.source import Document, parse_text

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository
DEFAULT_YAML = SHIPPED / "policies/builtin/default.yaml"
NOW = 1_800_000_000.0


def fail(policy: Policy, exc: BaseException, *, actor: str = "a", queue: str = "q",
         contract: JobContract | None = None) -> Decision:
    contract = contract or policy.contract(actor, queue)
    return policy.decide(Failure(exception=exc, actor=actor, queue=queue, attempt=1, retry_count=0,
                                 contract=contract, now=NOW, rand=lambda: 0.5))


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def http_error(status: int, retry_after: str | None = None) -> httpx.HTTPStatusError:
    request = httpx.Request("POST", "https://api.example/v1/charges")
    headers = {"Retry-After": retry_after} if retry_after else {}
    return httpx.HTTPStatusError("err", request=request,
                                 response=httpx.Response(status, headers=headers, request=request))


def rule_name(decision: Decision) -> str | None:
    return decision.rule.rsplit(" ", 1)[-1].strip("()") if decision.rule else None


# -- extension -------------------------------------------------------------------------------------


def test_a_file_that_only_sets_owners_keeps_the_429_and_fail_fast_rules(tmp_path: Path) -> None:
    path = write(tmp_path / "policies", "owners.yaml", "defaults:\n  owner: team-core\nqueues:\n"
                                                       "  payments: {owner: team-payments}\n")
    policy = Policy.load(path.parent)
    throttled = fail(policy, http_error(429, "7"))
    assert (throttled.action, throttled.error_class, throttled.delay, throttled.rate_limited) == \
        ("retry", "rate_limited", 7.0, True)
    assert rule_name(throttled) == "http-429"
    for exc in (ValueError("bad amount"), TypeError("wrong type"), http_error(422)):
        decision = fail(policy, exc)
        assert (decision.action, decision.error_class) == ("fail", "invalid_input"), exc
    assert policy.contract("a", "payments").owner == "team-payments"
    assert policy.contract("a", "other").owner == "team-core"
    assert policy.sources == (BUILTIN_PATH, str(path)) and policy.inherits
    result = check_path(path.parent)
    assert (result.ok, result.rules, result.builtin_rules, result.warnings) == (True, 0, 12, ())


def test_a_copy_of_default_yaml_with_one_key_changed_loads(tmp_path: Path) -> None:
    text = DEFAULT_YAML.read_text()
    assert text.count("  max_attempts: 5 ") == 1
    path = write(tmp_path / "policies", "default.yaml", text.replace("  max_attempts: 5 ", "  max_attempts: 2 "))
    policy, builtin = Policy.load(path.parent), Policy.load(None)
    assert policy.contract("a", "q").max_attempts == 2
    assert policy.lease == builtin.lease and policy.classes == builtin.classes
    for exc in (http_error(429, "3"), ValueError(), TimeoutError(), httpx.ReadTimeout("r"), PermissionError()):
        ours, theirs = fail(policy, exc), fail(builtin, exc)
        assert (ours.action, ours.error_class, rule_name(ours)) == (theirs.action, theirs.error_class,
                                                                    rule_name(theirs)), exc
    result = check_path(path.parent)
    assert result.ok and not result.warnings, (result.problems, result.warnings)
    assert (result.rules, result.builtin_rules) == (12, 12)  # the copy's rules shadow the built-in ones: no error


def test_a_key_set_in_two_of_the_users_files_is_still_an_error_naming_both(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    write(folder, "10-default.yaml", DEFAULT_YAML.read_text())
    second = write(folder, "20-mine.yaml", "defaults:\n  max_attempts: 2\n")
    with pytest.raises(PolicyError) as caught:
        Policy.load(folder)
    message = str(caught.value)
    assert message.startswith(f"{second}:2: ")
    assert f"defined twice: first at {folder / '10-default.yaml'}:" in message
    assert "set each key once, in one file" in message


def test_user_keys_override_the_keys_of_the_builtin_document() -> None:
    base = parse_text("defaults:\n  max_attempts: 9\n  owner: base\nclasses:\n  transient: {action: dead}\n",
                      BUILTIN_PATH)
    base = Document(base.path, base.root, builtin=True)
    user = parse_text("defaults:\n  max_attempts: 3\nclasses:\n  transient: {action: retry}\n", "mine.yaml")
    policy = Policy.from_documents([base, user])
    contract = policy.contract("a", "q")
    assert (contract.max_attempts, contract.owner) == (3, "base")
    assert policy.classes["transient"].action == "retry"
    assert policy.spec.origins["defaults.max_attempts"] == "mine.yaml:2"


def test_user_rules_are_tried_before_the_builtin_rules(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "rules:\n  - {name: retry-values, exception: ValueError, class: transient}\n")
    policy = Policy.load(path)
    assert [rule.name for rule in policy.rules_for("a", "q")][:2] == ["retry-values", "http-429"]
    decision = fail(policy, ValueError("flaky parser"))
    assert (decision.action, decision.rule) == ("retry", f"{path}:2 (retry-values)")
    assert fail(policy, TypeError()).action == "fail"  # the built-in bad-values rule still applies
    assert check_path(path).ok  # hiding a built-in rule is an override, not an unreachable rule


def test_inherit_false_drops_the_builtin_policy(tmp_path: Path) -> None:
    path = write(tmp_path, "only.yaml", "inherit: false\nrules:\n  - {name: t, exception: TimeoutError, "
                                        "class: transient}\n")
    policy = Policy.load(path)
    assert policy.sources == (str(path),) and not policy.inherits
    assert [rule.name for rule in policy.rules_for("a", "q")] == ["t"]
    assert fail(policy, ValueError()).action == "retry"  # no built-in bad-values rule: the default class
    throttled = fail(policy, http_error(429, "7"))
    assert (throttled.error_class, throttled.rate_limited) == ("transient", False)
    result = check_path(path)
    assert result.ok and (result.rules, result.builtin_rules, result.inherits) == (1, 0, False)


def test_inherit_must_be_true_or_false(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "version: 1\ninherit: no-thanks\n")
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    assert str(caught.value).startswith(f"{path}:2: ") and caught.value.field == "inherit"
    assert "expected true or false" in str(caught.value)


# -- ambiguous errors ------------------------------------------------------------------------------

AMBIGUOUS: list[BaseException] = [
    httpx.ReadTimeout("read timed out"), httpx.WriteTimeout("w"), httpx.ReadError("r"), httpx.WriteError("w"),
    httpx.RemoteProtocolError("Server disconnected without sending a response."), TimeoutError("timed out"),
    ConnectionResetError(104, "Connection reset by peer"), http.client.RemoteDisconnected("closed"),
    ConnectionAbortedError(), BrokenPipeError(), http.client.IncompleteRead(b"par"), TimeLimitExceeded(),
]
NOT_SENT: list[BaseException] = [
    httpx.ConnectError("refused"), httpx.ConnectTimeout("connect timed out"), httpx.PoolTimeout("pool"),
    ConnectionRefusedError(111, "Connection refused"),
]


@pytest.mark.parametrize("exc", AMBIGUOUS, ids=lambda e: type(e).__name__)
def test_ambiguous_error_of_a_non_idempotent_job_goes_to_review(exc: BaseException) -> None:
    policy = Policy.load(None)
    contract = policy.contract("charge", "payments", {"idempotent": False, "max_retries": 4})
    decision = fail(policy, exc, actor="charge", queue="payments", contract=contract)
    assert (decision.action, decision.error_class, decision.delay) == ("review", "side_effect_unknown", None)
    assert rule_name(decision) == AMBIGUOUS_RULE


@pytest.mark.parametrize("exc", AMBIGUOUS, ids=lambda e: type(e).__name__)
def test_ambiguous_error_of_an_idempotent_job_is_retried(exc: BaseException) -> None:
    decision = fail(Policy.load(None), exc)
    assert (decision.action, decision.error_class) == ("retry", "transient")
    assert rule_name(decision) != AMBIGUOUS_RULE


@pytest.mark.parametrize("exc", NOT_SENT, ids=lambda e: type(e).__name__)
def test_connect_error_of_a_non_idempotent_job_is_retried(exc: BaseException) -> None:
    policy = Policy.load(None)
    decision = fail(policy, exc, contract=policy.contract("charge", "payments", {"idempotent": False}))
    assert (decision.action, decision.error_class) == ("retry", "transient")


def test_non_idempotent_from_the_policy_and_from_a_users_file(tmp_path: Path) -> None:
    # The case: a payments queue declared non-idempotent in a file that sets nothing else.
    path = write(tmp_path, "p.yaml", "queues:\n  payments: {idempotent: false, owner: team-payments}\n")
    policy = Policy.load(path)
    assert fail(policy, httpx.ReadTimeout("r"), queue="payments").action == "review"
    assert fail(policy, httpx.ConnectError("c"), queue="payments").action == "retry"
    assert fail(policy, httpx.ReadTimeout("r"), queue="emails").action == "retry"
    assert fail(policy, dramatiq.Retry(delay=10), queue="payments").action == "retry"  # asked for by the actor


def test_a_rule_can_be_limited_to_idempotent_or_non_idempotent_jobs(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", """\
rules:
  - name: timeouts-retry
    idempotent: true
    exception: TimeoutError
    class: transient
  - name: timeouts-for-the-rest
    exception: TimeoutError
    class: invalid_input
""")
    policy = Policy.load(path)
    assert rule_name(fail(policy, TimeoutError())) == "timeouts-retry"
    other = fail(policy, TimeoutError(), contract=policy.contract("a", "q", {"idempotent": False}))
    assert (rule_name(other), other.action) == ("timeouts-for-the-rest", "fail")
    assert check_path(path).ok  # the narrower rule comes first: both reachable


def test_a_rule_without_the_condition_hides_a_later_one_with_it(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "rules:\n  - {name: all, exception: TimeoutError, class: transient}\n"
                                     "  - {name: some, idempotent: false, exception: TimeoutError, "
                                     "class: side_effect_unknown}\n")
    with pytest.raises(PolicyError, match="rule 'some' is unreachable"):
        Policy.load(path)


def test_the_idempotent_condition_must_be_true_or_false(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", "rules:\n  - name: r\n    exception: TimeoutError\n    idempotent: sometimes\n"
                                     "    class: transient\n")
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    assert str(caught.value).startswith(f"{path}:4: ") and caught.value.field == "rules[0].idempotent"


# -- check warnings --------------------------------------------------------------------------------


def test_check_warns_when_a_rule_retries_an_ambiguous_error_of_a_non_idempotent_queue(tmp_path: Path) -> None:
    path = write(tmp_path, "p.yaml", """\
rules:
  - name: network
    exception: httpx.TransportError
    class: transient
queues:
  payments:
    idempotent: false
  emails: {owner: growth}
""")
    result = check_path(path)
    assert result.ok
    assert [str(w).split(": warning: ")[0] for w in result.warnings] == [f"{path}:2"]
    text = str(result.warnings[0])
    assert "rule 'network' (class transient) retries httpx.ReadTimeout" in text
    assert f"queue 'payments', which is not idempotent ({path}:6)" in text
    assert "httpx.ConnectError" not in text and "\n" not in text


def test_check_warns_on_a_retrying_default_class_and_on_a_retrying_side_effect_class(tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    first = write(folder, "10-actors.yaml", "inherit: false\nactors:\n  charge:\n    idempotent: false\n"
                                            "    default_class: transient\n")
    assert [str(w).split(": warning: ")[0] for w in check_path(folder).warnings] == [f"{first}:3"]
    assert "default_class 'transient' retries" in str(check_path(folder).warnings[0])
    first.write_text("defaults:\n  idempotent: false\n")
    write(folder, "20-classes.yaml", "classes:\n  side_effect_unknown: {action: retry}\n")
    warnings = check_path(folder).warnings
    assert [str(w).split(": warning: ")[0] for w in warnings] == [f"{folder / '20-classes.yaml'}:2"]
    assert "every job (defaults)" in str(warnings[0])


def test_check_warns_for_actors_declared_in_code(tmp_path: Path) -> None:
    from reliable.policy.ambiguity import DeclaredActor

    path = write(tmp_path, "p.yaml", "rules:\n  - {name: t, exception: TimeoutError, class: transient}\n")
    actors = [DeclaredActor("charge", "payments", {"idempotent": False}, "shop.charge"),
              DeclaredActor("email", "emails", {}, "shop.email")]
    warnings = check_path(path, actors=actors).warnings
    assert len(warnings) == 1 and str(warnings[0]).startswith(f"{path}:2: warning: rule 't'")
    assert "actor 'charge' (queue 'payments'), which is not idempotent (shop.charge)" in str(warnings[0])
    assert check_path(path).warnings == ()  # no actor is non-idempotent without the app


def test_shipped_policies_have_no_warnings() -> None:
    for path in (SHIPPED / "policies", SHIPPED / "policies/examples/http_api.yaml", ROOT / "examples/policies"):
        result = check_path(path)
        assert result.ok and result.warnings == (), (path, result.warnings)
