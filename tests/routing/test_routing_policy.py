"""Retry routing in the policy: parsing, validation (file, line, field) and decisions. Pure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from reliable.cli.main import cli
from reliable.errors import PolicyError
from reliable.policy import Decision, Failure, Policy
from reliable.policy.routes import MAX_QUEUE_NAME, Route, queue_name

POLICY = """\
version: 1
defaults:
  max_attempts: 6
  backoff: {base: 1s, cap: 10s, jitter: none}
classes:
  slow_timeout:
    action: retry
    queue: slow
    queue_after: 2
  throttled:
    action: retry
    rate_limited: true
    queue: throttled-lane
rules:
  - {name: timeouts, exception: TimeoutError, class: slow_timeout}
  - {name: reset, exception: ConnectionResetError, class: transient, queue: other.lane}
  - {name: limited, status: 429, class: throttled}
  - {name: refused, exception: ConnectionRefusedError, class: transient}
"""


@pytest.fixture
def policy_path(tmp_path: Path) -> Path:
    path = tmp_path / "routing.yaml"
    path.write_text(POLICY)
    return path


def decide(policy: Policy, exc: BaseException, attempt: int, *, rate_limited_retries: int = 0) -> Decision:
    contract = policy.contract("send", "default")
    return policy.decide(Failure(exception=exc, actor="send", queue="default", attempt=attempt,
                                 retry_count=attempt - 1, contract=contract, now=0.0,
                                 rate_limited_retries=rate_limited_retries))


def test_a_class_routes_its_retries_after_queue_after_retries(policy_path: Path) -> None:
    policy = Policy.load(policy_path)
    lanes = [decide(policy, TimeoutError("slow"), attempt).queue for attempt in range(1, 6)]
    assert lanes == [None, None, "slow", "slow", "slow"]  # retries 1 and 2 stay, 3 on go to the slow lane
    routed = decide(policy, TimeoutError("slow"), 3)
    assert routed.action == "retry" and routed.delay == 4.0
    assert "waits on queue slow (routed by class slow_timeout)" in routed.reason
    assert routed.as_detail()["queue"] == "slow"
    assert "queue" not in decide(policy, TimeoutError("slow"), 1).as_detail()  # unrouted details are unchanged


def test_a_rule_routes_its_retries_and_unrouted_classes_go_home(policy_path: Path) -> None:
    policy = Policy.load(policy_path)
    by_rule = decide(policy, ConnectionResetError("reset"), 1)
    assert by_rule.error_class == "transient" and by_rule.queue == "other.lane"
    assert f"routed by rule {policy_path}:" in by_rule.reason
    # the same class through a rule without `queue`: the job's own queue
    assert decide(policy, ConnectionRefusedError("refused"), 1).queue is None
    assert policy.lanes == ("other.lane", "slow", "throttled-lane")


def test_rate_limited_retries_are_routed_by_their_own_count(policy_path: Path) -> None:
    policy = Policy.load(policy_path)

    class Throttled(Exception):
        status_code = 429

    first = decide(policy, Throttled("429"), 4, rate_limited_retries=3)
    assert first.rate_limited and first.queue == "throttled-lane"


def test_no_retry_no_route(policy_path: Path) -> None:
    policy = Policy.load(policy_path)
    dead = decide(policy, TimeoutError("slow"), 6)  # max_attempts reached
    assert dead.action == "dead" and dead.queue is None


@pytest.mark.parametrize(("snippet", "line", "field", "message"), [
    ("classes:\n  x: {action: fail, queue: slow}\n", 3, "classes.x.queue", "needs action: retry"),
    ("classes:\n  x:\n    action: retry\n    queue_after: 2\n", 5, "classes.x.queue_after", "needs queue"),
    ("classes:\n  x: {action: retry, queue: 'a lane'}\n", 3, "classes.x.queue", "expected a queue name"),
    ("classes:\n  x: {action: retry, queue: slow.DQ}\n", 3, "classes.x.queue", "delay or dead-letter"),
    ("classes:\n  x: {action: retry, queue: " + "a" * 253 + "}\n", 3, "classes.x.queue",
     "queue name of 253 characters: at most 252"),
    ("rules:\n  - {exception: KeyError, class: transient, queue: " + "b" * 300 + "}\n", 3, "rules[0].queue",
     "at most 252"),
    ("classes:\n  x: {action: retry, queue: slow, queue_after: -1}\n", 3, "classes.x.queue_after",
     "expected an integer >= 0"),
    ("rules:\n  - exception: KeyError\n    class: invalid_input\n    queue: slow\n", 5, "rules[0].queue",
     "class 'invalid_input' does not retry"),
    ("rules:\n  - {exception: KeyError, class: transient, queue: [slow]}\n", 3, "rules[0].queue",
     "expected a queue name"),
    ("rules:\n  - {exception: KeyError, class: transient, queue_after: 1}\n", 3, "rules[0].queue_after",
     "needs queue"),
])
def test_bad_routes_name_file_line_and_field(tmp_path: Path, snippet: str, line: int, field: str,
                                             message: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("version: 1\n" + snippet)
    with pytest.raises(PolicyError) as raised:
        Policy.load(path)
    assert raised.value.path == str(path) and raised.value.line == line and raised.value.field == field
    assert message in str(raised.value)
    checked = CliRunner().invoke(cli, ["policy", "check", str(path)])
    assert checked.exit_code == 2 and f"{path}:{line}: {field}: " in checked.output


def test_queue_names_follow_dramatiq() -> None:
    assert queue_name("slow-lane.v2_x") == "slow-lane.v2_x"
    longest = "x" * MAX_QUEUE_NAME
    assert queue_name(longest) == longest and len(f"{longest}.DQ".encode()) == 255  # RabbitMQ's limit
    for bad in ("", "1slow", "slow lane", "slow.XQ", "x" * (MAX_QUEUE_NAME + 1), "x" * 256, 3, None):
        with pytest.raises(ValueError):
            queue_name(bad)
    assert Route("slow", 1, "class x").lane(1) is None and Route("slow", 1, "class x").lane(2) == "slow"


def test_check_and_explain_show_the_route(policy_path: Path) -> None:
    runner = CliRunner()
    checked = runner.invoke(cli, ["policy", "check", str(policy_path)])
    assert checked.exit_code == 0, checked.output
    assert "retries routed to queue(s): other.lane, slow, throttled-lane" in checked.output
    as_json = json.loads(runner.invoke(cli, ["policy", "check", str(policy_path), "--json"]).output)
    assert as_json["lanes"] == ["other.lane", "slow", "throttled-lane"]
    explained = runner.invoke(cli, ["policy", "explain", str(policy_path), "--exception", "TimeoutError",
                                    "--attempt", "3"])
    assert explained.exit_code == 0, explained.output
    assert "queue       slow" in explained.output
    first = runner.invoke(cli, ["policy", "explain", str(policy_path), "--exception", "TimeoutError", "--json"])
    assert "queue" not in json.loads(first.output)["decision"]
    third = runner.invoke(cli, ["policy", "explain", str(policy_path), "--exception", "TimeoutError", "--json",
                                "--attempt", "3"])
    assert json.loads(third.output)["decision"]["queue"] == "slow"
