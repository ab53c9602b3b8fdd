"""The operators policy: parsing with file:line:field errors, matching, identity resolution."""

from __future__ import annotations

from pathlib import Path

import pytest

from reliable.errors import ControlRefused, PolicyError
from reliable.operators import Operator, OperatorsPolicy

EXAMPLE = Path(__file__).resolve().parents[2] / "policies/operators/operators.yaml"


def test_shipped_example_loads_and_means_what_it_says() -> None:
    policy = OperatorsPolicy.load(EXAMPLE)
    assert policy.allows("alice", "cancel", "billing")
    assert policy.allows("bob", "pause", "imports-eu") and not policy.allows("bob", "cancel", "exports")
    assert policy.allows("oncall-jo", "retry", "billing")  # retry is requeue
    assert policy.allows("oncall-jo", "resolve", "billing")
    assert not policy.allows("mallory", "pause", "exports")
    with pytest.raises(ControlRefused, match=r"'mallory' \(roles viewer\) may not pause jobs on queue 'exports'"):
        policy.check("mallory", "pause", "exports")


def test_no_file_allows_everything() -> None:
    assert OperatorsPolicy.allow_all().allows("anyone", "discard", "any")


@pytest.mark.parametrize(("text", "line", "field", "message"), [
    ("operators: {a: [admin]}\nroles:\n  admin:\n    - {commands: [explode]}\n", 4, "roles.admin[0].commands",
     "unknown command 'explode'"),
    ("operators:\n  a: [ghost]\nroles: {admin: []}\n", 2, "operators.a", "unknown role 'ghost'"),
    ("operators: {}\nroles: {}\nextra: 1\n", 3, "extra", "unknown key 'extra'"),
    ("roles: {}\n", 1, "operators", "missing 'operators'"),
    ("operators: {}\nroles:\n  r:\n    - {commands: [pause], queue: [x]}\n", 4, "roles.r[0].queue", "unknown key"),
    ("operators: [a]\nroles: {}\n", 1, "operators", "expected a mapping"),
    ("operators: {a: b\n", 2, None, "invalid YAML"),
])
def test_errors_name_file_line_and_field(tmp_path: Path, text: str, line: int, field: str | None,
                                         message: str) -> None:
    path = tmp_path / "ops.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as info:
        OperatorsPolicy.load(path)
    err = info.value
    assert message in str(err) and err.path == str(path) and err.line == line and err.field == field
    assert str(err).startswith(f"{path}:{line}: ")


def test_missing_file() -> None:
    with pytest.raises(PolicyError, match="cannot read operators policy"):
        OperatorsPolicy.load("/nonexistent/ops.yaml")


def test_identity_resolution_order() -> None:
    assert Operator.resolve("dana", environ={"RELIABLE_OPERATOR": "x"}, host="h") == Operator("dana", "h", "option")
    assert Operator.resolve(None, environ={"RELIABLE_OPERATOR": "x"}, host="h") == Operator("x", "h", "env")
    me = Operator.resolve(None, environ={})
    assert me.source == "os" and me.name and me.host
