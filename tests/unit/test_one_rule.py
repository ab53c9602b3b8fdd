"""One rule, one place: each test walks the package for a second copy of a rule that has one owner.

Each checker is a function of source text, and is tested on a snippet that breaks its rule, so a
walk that finds nothing is a walk that could have found something.

- ISO times are written and read only by `reliable.isotime`.
- The heartbeat interval is compared with the lease TTL only by `reliable.policy.check_heartbeat`.
- "Failed for good" (FAILED and DEAD together) is spelled only in `reliable.states`.
- No module lists most of an event row's fields by hand but `reliable.disclosure` (tested against
  `reliable.store.JobEvent` in test_disclosure.py) and the dataclass itself.
- `reliable.metrics` names no event of the state machine by hand: its sets derive from `states`.
- A text is shortened for display by `reliable.inputs.shorten` (or clipped by `inputs.clip`), not
  by a slice and an ellipsis written again; a name's bound is `inputs.MAX_NAME`, not another 255.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

import reliable
from reliable.states import Event, JobStatus
from reliable.store import JobEvent

PACKAGE = Path(reliable.__file__).parent


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path.relative_to(PACKAGE.parent).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _found(checker: Callable[[ast.Module], list[int]]) -> dict[str, list[int]]:
    """The package's modules in which `checker` finds lines, with those lines."""
    return {path: lines for path, tree in _modules() if (lines := checker(tree))}


def _strings(node: ast.AST) -> set[str]:
    return {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def _names(node: ast.AST) -> set[str]:
    """The names and attribute names `node` mentions (`JobStatus.FAILED` -> JobStatus, FAILED)."""
    return ({n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            | {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)})


# -- ISO times ------------------------------------------------------------------------------------

_TIME_METHODS = frozenset({"isoformat", "fromisoformat", "strftime", "strptime"})


def iso_time_calls(tree: ast.Module) -> list[int]:
    """Lines calling a datetime method that writes or reads an ISO time (or any formatted time)."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr in _TIME_METHODS]


def test_the_iso_time_checker_finds_a_formatter() -> None:
    tree = ast.parse("from datetime import datetime\n\ndef f(e):\n    return datetime.fromtimestamp(e).isoformat()\n")
    assert iso_time_calls(tree) == [4]
    assert iso_time_calls(ast.parse("moment.strftime('%Y')\ndatetime.fromisoformat(t)\n")) == [1, 2]


def test_iso_times_are_written_and_read_only_in_isotime() -> None:
    found = _found(iso_time_calls)
    assert set(found) == {"reliable/isotime.py"}, f"format or parse times with reliable.isotime: {found}"


# -- heartbeat shorter than the lease -------------------------------------------------------------

def lease_timing_comparisons(tree: ast.Module) -> list[int]:
    """Lines comparing a heartbeat interval with a lease TTL (by the names compared)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            text = ast.unparse(node).lower()
            if "ttl" in text and ("heartbeat" in text or "interval" in text):
                found.append(node.lineno)
    return found


def test_the_lease_timing_checker_finds_a_comparison() -> None:
    assert lease_timing_comparisons(ast.parse("if self.heartbeat_interval >= self.ttl:\n    raise X\n")) == [1]
    assert lease_timing_comparisons(ast.parse("ok = interval < lease_ttl\n")) == [1]
    assert lease_timing_comparisons(ast.parse("ok = interval < timeout\n")) == []


def test_each_caller_of_the_lease_timing_rule_names_its_own_settings() -> None:
    from reliable.errors import ConfigError, HeartbeatTooSlow
    from reliable.policy import LeaseSettings, check_heartbeat
    from reliable.worker.heartbeat import Heartbeat
    from reliable.worker.settings import Settings

    check_heartbeat(9.9, 10)
    policy_names = r"^lease.heartbeat_interval \(10s\) must be less than lease.ttl \(10s\)$"
    with pytest.raises(HeartbeatTooSlow, match=policy_names):
        LeaseSettings(ttl=10, heartbeat_interval=10)
    argument_names = r"^heartbeat_interval \(12s\) must be less than lease_ttl \(5s\): lower"
    with pytest.raises(HeartbeatTooSlow, match=argument_names):
        Settings.resolve("sqlite:///x.db", policy=None, lease_ttl=5, heartbeat_interval=12, recovery=False,
                         recovery_interval=None, sweep_after=None, listeners=(), metrics=False, json_logs=False,
                         max_connections=None, group_commit=False, tracing=None, schedules=None, replication="off")
    with pytest.raises(ValueError, match=r"^heartbeat interval \(3s\) must be less than lease ttl \(2s\)$"):
        Heartbeat(cast(Any, None), worker_id="w", interval=3, lease_ttl=2)
    assert issubclass(HeartbeatTooSlow, ConfigError) and issubclass(HeartbeatTooSlow, ValueError)


def test_heartbeat_against_lease_is_checked_in_one_place() -> None:
    found = _found(lease_timing_comparisons)
    assert set(found) == {"reliable/policy/model.py"}, f"use reliable.policy.check_heartbeat: {found}"
    assert len(found["reliable/policy/model.py"]) == 1


# -- failed for good ------------------------------------------------------------------------------

def failed_for_good_spellings(tree: ast.Module) -> list[int]:
    """Lines of a set, tuple or list literal naming both FAILED and DEAD (strings or JobStatus members).

    A dict keyed by state (a colour, a style, the next commands for each state) is a table of every
    state, not the rule: it is not counted.
    """
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Set | ast.Tuple | ast.List):
            spelled = {e.value if isinstance(e, ast.Constant) else e.attr for e in node.elts
                       if (isinstance(e, ast.Constant) and isinstance(e.value, str)) or isinstance(e, ast.Attribute)}
            if {"FAILED", "DEAD"} <= spelled:
                found.append(node.lineno)
    return found


def test_the_failed_for_good_checker_finds_a_spelling() -> None:
    assert failed_for_good_spellings(ast.parse('x = state in ("FAILED", "DEAD", "REVIEW")\n')) == [1]
    assert failed_for_good_spellings(ast.parse("x = frozenset({JobStatus.FAILED, JobStatus.DEAD})\n")) == [1]
    assert failed_for_good_spellings(ast.parse('x = ("FAILED", "RUNNING")\n')) == []
    assert failed_for_good_spellings(ast.parse('COLOURS = {"FAILED": "red", "DEAD": "red"}\n')) == []


def test_failed_for_good_is_spelled_only_in_states() -> None:
    found = _found(failed_for_good_spellings)
    assert set(found) <= {"reliable/states.py"}, f"use states.FAILED_FOR_GOOD or states.FAILURE_STATES: {found}"


# -- event fields ---------------------------------------------------------------------------------

EVENT_ROW = frozenset(f.name for f in dataclasses.fields(JobEvent))


def event_field_lists(tree: ast.Module) -> list[int]:
    """Lines of a literal (or a call's arguments) naming at least half the fields of an event row."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Set | ast.Tuple | ast.List | ast.Dict | ast.Call):
            parts = (node.keys if isinstance(node, ast.Dict) else node.args if isinstance(node, ast.Call)
                     else node.elts)
            named = {p.value for p in parts if isinstance(p, ast.Constant) and isinstance(p.value, str)}
            if len(named & EVENT_ROW) * 2 >= len(EVENT_ROW):
                found.append(node.lineno)
    return found


def test_the_event_field_checker_finds_a_list() -> None:
    half = sorted(EVENT_ROW)[: (len(EVENT_ROW) + 1) // 2]
    assert event_field_lists(ast.parse(f"FIELDS = {tuple(half)!r}\n")) == [1]
    assert event_field_lists(ast.parse(f"FIELDS = {tuple(half[:-1])!r}\n")) == []


def test_event_fields_are_listed_once() -> None:
    allowed = {"reliable/disclosure.py"}  # each field's kind, checked against JobEvent (test_disclosure.py)
    found = _found(event_field_lists)
    assert set(found) <= allowed, f"derive from JobEvent / disclosure.EVENT_FIELDS: {found}"


def test_the_log_line_and_the_api_schema_carry_every_field_of_the_event_row() -> None:
    from reliable.events import EVENT_FIELDS as LINE
    from reliable.web.openapi import document

    assert EVENT_ROW - {"id", "at", "traceback"} <= set(LINE) and "ts" in LINE
    assert set(document()["components"]["schemas"]["Event"]["properties"]) == EVENT_ROW


# -- metrics' event sets --------------------------------------------------------------------------

def hand_written_events(tree: ast.Module) -> set[str]:
    """The names of the state machine's events or states that `tree` writes as string literals."""
    spelled = {e.value for e in Event} | {s.value for s in JobStatus}
    return _strings(tree) & spelled


def test_the_metrics_checker_finds_a_hand_written_event() -> None:
    assert hand_written_events(ast.parse('if name in ("lease_expired", "fail"):\n    pass\n')) == {"lease_expired",
                                                                                                   "fail"}


def test_metrics_derive_their_event_sets_from_states() -> None:
    tree = ast.parse((PACKAGE / "metrics.py").read_text(encoding="utf-8"))
    assert hand_written_events(tree) == {"lease_expired", "retry_due"}, \
        "metrics.py may write only its label values (recovery kinds); every event set comes from states"
    assert {"Event", "ATTEMPT_ENDS", "OPERATOR_EVENTS", "LEASE_EXPIRIES"} <= _names(tree)


# -- shortening text ------------------------------------------------------------------------------

_ELLIPSES = ("...", "\u2026")
#: Modules that cut text their own way, each for its reason.
SHORTENING_ALLOWED = {
    "reliable/inputs.py": "the rule itself (shorten, clip)",
    "reliable/durations.py": "pure, imports only errors.py (the layer table): shows a bad value in its error",
    "reliable/events.py": "a log line's field says how much it left out ('[truncated N chars]', a documented form)",
    "reliable/store/json_text.py": "what the store writes of an error text (issue 38: text the store can hold)",
    "reliable/alerts/lifecycle.py": "a label value kept unique by a digest of what was cut",
    "reliable/demo/runner.py": "a job id's first characters in a command line the demo shows",
}


def _sliced(node: ast.AST) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)


def _ellipsis(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith(_ELLIPSES)


def text_shortenings(tree: ast.Module) -> list[int]:
    """Lines that shorten a text by hand: a slice followed by an ellipsis (`t[:n] + "…"`, `f"{t[:n]}..."`)."""
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add) and _sliced(node.left)
                and _ellipsis(node.right)) or (isinstance(node, ast.JoinedStr) and any(
                isinstance(a, ast.FormattedValue) and _sliced(a.value) and _ellipsis(b)
                for a, b in zip(node.values, node.values[1:], strict=False))):
            found.append(node.lineno)
    return found


def test_the_shortening_checker_finds_a_slice_and_an_ellipsis() -> None:
    assert text_shortenings(ast.parse('x = text[: limit - 1] + "\u2026"\n')) == [1]
    assert text_shortenings(ast.parse('x = f"{text[:37]}..."\n')) == [1]
    assert text_shortenings(ast.parse('x = text[:37] + suffix\n')) == []
    assert text_shortenings(ast.parse('x = f"{text[:37]} more"\n')) == []


def test_text_is_shortened_in_one_place() -> None:
    found = _found(text_shortenings)
    assert set(found) <= set(SHORTENING_ALLOWED), f"use reliable.inputs.shorten (or clip): {found}"


def test_shorten_keeps_to_its_width_and_marks_a_cut() -> None:
    from reliable.inputs import shorten

    assert shorten("abcdef", 6) == "abcdef" and shorten("abcdefg", 6) == "abcde\u2026"
    assert shorten(12345, 3) == "12\u2026"


def name_bounds(tree: ast.Module) -> list[int]:
    """Lines that set a module constant named like a name's bound (`*MAX_NAME*`) to a number of its own."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
            and isinstance(n.value.value, int)
            and any(isinstance(t, ast.Name) and t.id.lstrip("_") == "MAX_NAME" for t in n.targets)]


def test_the_name_bound_checker_finds_a_second_one() -> None:
    assert name_bounds(ast.parse("_MAX_NAME = 255\n")) == [1]
    assert name_bounds(ast.parse("MAX_NAMES = 50\nLIMIT = MAX_NAME\n")) == []


#: Modules with a constant of that name that is no bound on a name a person enters, each with its reason.
NAME_BOUND_ALLOWED = {
    "reliable/inputs.py": "the rule itself",
    "reliable/worker/delivery.py": "how much of each name of a forged message its refusal event keeps",
}


def test_a_names_bound_is_set_in_one_place() -> None:
    found = _found(name_bounds)
    assert set(found) <= set(NAME_BOUND_ALLOWED), f"use reliable.inputs.MAX_NAME: {found}"


def test_the_duration_bound_is_stated_from_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from reliable import durations

    monkeypatch.setattr(durations, "MAX_DURATION", 10 * 365.25 * 86400)
    with pytest.raises(durations.DurationTooLong, match=r"at most 315576000 seconds \(3652d12h, 10 years\)"):
        durations.parse_duration("3653d")
