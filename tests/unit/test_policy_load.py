"""Loading and validating policy files: bad files give one-line errors naming file and line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from reliable.errors import PolicyError
from reliable.policy import LeaseSettings, Policy
from reliable.policy.check import check_path

POLICY_DIR = Path(__file__).resolve().parents[1] / "policy"
BAD = sorted((POLICY_DIR / "bad").glob("*.yaml"))
ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository


def expectation(path: Path) -> tuple[int, str]:
    """The `# expect: LINE | fragment` header of a bad policy file."""
    match = re.match(r"# expect: (\d+) \| (.+)", path.read_text().splitlines()[0])
    assert match, f"{path.name} has no expect header"
    return int(match.group(1)), match.group(2).strip()


def test_there_are_many_kinds_of_bad_files() -> None:
    assert len(BAD) >= 12


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_file_gives_one_line_error_with_file_and_line(path: Path) -> None:
    line, fragment = expectation(path)
    with pytest.raises(PolicyError) as caught:
        Policy.load(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message
    assert caught.value.line == line
    assert caught.value.path == str(path)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_check_reports_the_same_problem(path: Path) -> None:
    line, fragment = expectation(path)
    result = check_path(path)
    assert not result.ok
    assert any(p.line == line and fragment in p.message for p in result.problems), result.problems
    assert all("\n" not in str(p) for p in result.problems)


def test_error_names_the_field() -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.load(POLICY_DIR / "bad" / "bad_duration.yaml")
    assert caught.value.field == "defaults.backoff.cap"


def test_duplicate_actor_across_files_names_both_places() -> None:
    with pytest.raises(PolicyError) as caught:
        Policy.load(POLICY_DIR / "dup_actor")
    message = str(caught.value)
    second = POLICY_DIR / "dup_actor" / "20-more.yaml"
    first = POLICY_DIR / "dup_actor" / "10-base.yaml"
    assert message.startswith(f"{second}:4: ")
    assert f"{first}:2" in message
    assert "defined twice" in message


def test_directory_merges_files_in_name_order() -> None:
    policy = Policy.load(POLICY_DIR / "merge")
    assert policy.lease == LeaseSettings(ttl=60.0, heartbeat_interval=20.0)
    builtin = [rule.name for rule in Policy.load(None).rules_for("x", "y")]
    assert [rule.name for rule in policy.rules_for("x", "y")] == ["first", "second", *builtin]
    assert policy.contract("a1", "q1").owner == "one"
    assert policy.contract("a2", "q1").idempotent is False
    assert policy.contract("a2", "other").max_attempts == 3
    assert len(policy.sources) == 3  # the built-in policy and two files; ignored.txt is not read


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="no such policy file"):
        Policy.load(tmp_path / "nope.yaml")
    with pytest.raises(PolicyError, match=r"no \*\.yaml"):
        Policy.load(tmp_path)


def test_empty_file_is_the_builtin_behaviour(tmp_path: Path) -> None:
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing yet\n")
    policy = Policy.load(empty)
    assert policy.contract("a", "q") == Policy.load(None).contract("a", "q")


def test_unimportable_exception_is_an_error_for_check_only() -> None:
    path = POLICY_DIR / "check_only" / "unimportable.yaml"
    Policy.load(path)  # run time never imports
    result = check_path(path)
    lines = sorted((p.line, p.message) for p in result.problems)
    assert [line for line, _ in lines] == [3, 6]
    assert "no_such_package_xyz" in lines[0][1]
    assert "NoSuchErrorAnywhere" in lines[1][1]


def test_check_finds_rules_shadowed_by_a_superclass() -> None:
    path = POLICY_DIR / "check_only" / "subclass_shadow.yaml"
    Policy.load(path)  # without imports the subclass relation is unknown
    result = check_path(path)
    assert len(result.problems) == 1
    assert result.problems[0].line == 5
    assert "unreachable" in result.problems[0].message


def test_shipped_policies_pass_check() -> None:
    for path in (SHIPPED / "policies", SHIPPED / "policies/builtin/default.yaml",
                 SHIPPED / "policies/examples/http_api.yaml"):
        result = check_path(path)
        assert result.ok, result.problems


def test_check_collects_every_problem(tmp_path: Path) -> None:
    path = tmp_path / "many.yaml"
    path.write_text("defaults:\n  max_attempts: 0\n  stop_grace: soon\nrules:\n  - status: 999\n    class: nope\n")
    result = check_path(path)
    assert sorted(p.line for p in result.problems if p.line) == [2, 3, 5, 6]
    assert all(str(p).startswith(f"{path}:") for p in result.problems)


def test_anchors_and_aliases_are_followed(tmp_path: Path) -> None:
    path = tmp_path / "anchors.yaml"
    path.write_text("defaults:\n  backoff: &fast {base: 100ms, cap: 2s}\nqueues:\n  q:\n    backoff: *fast\n")
    assert Policy.load(path).contract("a", "q").backoff.cap == 2.0
