"""User patterns (reliable/patterns.py): RE2, linear time, a bounded prefix, refused at load with the reason."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from reliable.errors import PolicyError
from reliable.patterns import MAX_SEARCHED_CHARS, compile_pattern
from reliable.policy import Policy
from reliable.policy.check import check_path


# The long message is cut to its first MAX_SEARCHED_CHARS characters, all a's: `$` matches there.
@pytest.mark.parametrize(("text", "found"), [("a" * 40 + "!", False), ("a" * 10_000_000 + "!", True)])
def test_a_backtracking_pattern_runs_in_bounded_time(text: str, found: bool) -> None:
    pattern = compile_pattern("(a+)+$")
    started = time.process_time()  # this process's CPU: the bound is on work, not on a loaded machine's clock
    assert pattern.search(text) is found
    assert time.process_time() - started < 0.5


def test_only_the_first_characters_are_searched() -> None:
    pattern = compile_pattern("needle")
    assert pattern.search("needle" + "x" * MAX_SEARCHED_CHARS)
    assert pattern.search("x" * (MAX_SEARCHED_CHARS - 6) + "needle")
    assert not pattern.search("x" * MAX_SEARCHED_CHARS + "needle")


def test_python_syntax_re2_shares_still_works() -> None:
    assert compile_pattern(r"(?i)^charge (?P<code>\d{3}) declined\b").search("CHARGE 402 declined: card")
    assert compile_pattern("(a+)+$").search("a" * 40)


@pytest.mark.parametrize(("pattern", "reason"), [
    (r"(a)\1", "backreferences are not supported"),
    (r"(?P<x>a)(?P=x)", "backreferences are not supported"),
    (r"declined(?=: card)", "lookaround"),
    (r"(?<!not )declined", "lookaround"),
    (r"declined\Z", "invalid escape sequence"),
    (r"(unclosed", "missing )"),
])
def test_patterns_re2_cannot_run_are_refused_at_load_with_file_line_and_reason(tmp_path: Path, pattern: str,
                                                                                  reason: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(f"version: 1\nrules:\n  - name: odd\n    message: '{pattern}'\n    class: transient\n")
    with pytest.raises(PolicyError) as info:
        Policy.load(path)
    message = str(info.value)
    assert message.startswith(f"{path}:4: ") and reason in message and "RE2" in message, message
    problems = check_path(path).problems
    assert [(p.line, p.field) for p in problems] == [(4, "rules[0].message")] and reason in problems[0].message


def test_classification_uses_the_same_engine(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\nrules:\n  - {name: bt, message: '(a+)+$', class: authorization}\n")
    policy = Policy.load(path)
    started = time.process_time()
    assert policy.classify(ValueError("a" * 40 + "!"), "a", "q")[0] == "invalid_input"
    assert policy.classify(ValueError("a" * 40), "a", "q")[0] == "authorization"
    assert time.process_time() - started < 0.5
