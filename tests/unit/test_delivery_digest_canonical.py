"""The delivery digest (reliable.delivery_digest): pure, equal for every legitimate copy of a
message, different for another actor, other arguments or another behaviour-choosing option."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable.delivery_digest import DIGEST_LENGTH, delivery_digest, differences, message_digest
from reliable.options import DELIVERY_OPTIONS, OWN_QUEUE, RETRY_OPTIONS, STORED_CONTRACT, UNTRUSTED_IN_MESSAGE
from reliable.tracecontext import TRACE_OPTIONS

BASE: dict[str, Any] = {"actor_name": "export", "args": ["acct-1", 3], "kwargs": {"force": True}, "options": {}}

#: Options that change between copies of one job's message, or only link or annotate it.
NOISE: dict[str, Any] = {
    "eta": 1, "retries": 3, "traceback": "Traceback ...", "requeue_timestamp": 2, "redelivered": True,
    "redis_message_id": "r", "broker_priority": 5, "delay": 1000, "parent_job_id": "p", "workflow_id": "w",
    "reliable_registered": True, STORED_CONTRACT: {"idempotent": False}, OWN_QUEUE: "lane",
    "reliable_limit_deferrals": 4, **{name: "x" for name in TRACE_OPTIONS},
    **{name: True for name in UNTRUSTED_IN_MESSAGE},
}


def digest(data: dict[str, Any]) -> str:
    return message_digest(data)


def test_the_digest_is_short_hex() -> None:
    value = digest(BASE)
    assert len(value) == DIGEST_LENGTH and int(value, 16) >= 0


def test_the_actor_the_arguments_and_the_keyword_arguments_count() -> None:
    assert len({digest(BASE), digest({**BASE, "actor_name": "import"}), digest({**BASE, "args": ["acct-2", 3]}),
                digest({**BASE, "args": [3, "acct-1"]}), digest({**BASE, "kwargs": {"force": False}}),
                digest({**BASE, "kwargs": {}})}) == 6


@pytest.mark.parametrize("option", DELIVERY_OPTIONS)
def test_every_behaviour_option_counts(option: str) -> None:
    assert digest({**BASE, "options": {option: "a"}}) not in (digest(BASE), digest({**BASE, "options": {option: "b"}}))


def test_per_delivery_and_linking_options_do_not_count() -> None:
    assert not set(NOISE) & set(DELIVERY_OPTIONS)
    assert digest({**BASE, "options": NOISE}) == digest(BASE)
    assert digest({**BASE, "options": {"time_limit": None}}) == digest(BASE), "None is an option not set"


def test_the_retry_options_are_behaviour_options() -> None:
    assert set(RETRY_OPTIONS) <= set(DELIVERY_OPTIONS)


def test_a_pipelines_workflow_id_does_not_count_at_any_step() -> None:
    step = {"queue_name": "q", "actor_name": "b", "args": [1], "kwargs": {}, "message_id": "m2",
            "message_timestamp": 1, "options": {"pipe_target": {"queue_name": "q", "actor_name": "c", "args": [],
                                                                 "kwargs": {}, "options": {}, "message_id": "m3",
                                                                 "message_timestamp": 1}}}
    linked = json.loads(json.dumps(step))
    linked["options"]["workflow_id"] = "w"
    linked["options"]["pipe_target"]["options"]["workflow_id"] = "w"
    assert digest({**BASE, "options": {"pipe_target": step}}) == digest({**BASE, "options": {"pipe_target": linked}})
    other = json.loads(json.dumps(step))
    other["options"]["pipe_target"]["actor_name"] = "evil"
    assert digest({**BASE, "options": {"pipe_target": step}}) != digest({**BASE, "options": {"pipe_target": other}})


def test_a_message_as_sent_and_as_decoded_hash_alike() -> None:
    sent = {"actor_name": "export", "args": ("acct-1", (1, 2)), "kwargs": {"b": 1, "a": {2: "x", 10: "y"}},
            "options": {"on_success": "done", "retries": 1}}
    decoded = json.loads(json.dumps(sent))
    decoded["kwargs"] = {"a": decoded["kwargs"]["a"], "b": 1}  # another key order, as another encoder may write
    assert message_digest(sent, decoded=False) == digest(decoded)
    assert message_digest(decoded, decoded=False) == digest(decoded)


def test_keys_of_mixed_types_are_hashed_as_json_holds_them() -> None:
    mixed = {**BASE, "kwargs": {"table": {1: "a", "b": 2}}}
    assert message_digest(mixed, decoded=False) == digest(json.loads(json.dumps(mixed)))


def test_options_that_are_not_a_mapping_count_as_none() -> None:
    assert digest({**BASE, "options": ["on_success"]}) == digest(BASE)


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                    | st.dictionaries(st.text(max_size=5) | st.integers(), inner, max_size=4), max_leaves=20))
def test_any_json_value_hashes_like_its_decoded_copy(value: Any) -> None:
    assert delivery_digest("a", [value], {"k": value}, {"on_failure": value}, decoded=False) == \
        delivery_digest("a", json.loads(json.dumps([value])), json.loads(json.dumps({"k": value})),
                        {"on_failure": json.loads(json.dumps(value))})


def test_differences_name_the_parts_never_a_value() -> None:
    forged = {**BASE, "actor_name": "import", "args": ["secret-token"], "options": {"on_success": "leak", "eta": 5}}
    found = differences(BASE, forged)
    assert found == ["actor", "args", "options.on_success"]
    assert "secret" not in json.dumps(found)
    assert differences(BASE, {**BASE, "options": NOISE}) == []


def test_the_digest_of_a_message_is_pinned_whatever_the_order_of_its_options() -> None:
    """The value main computed before `_chosen` took the options from the message rather than from
    DELIVERY_OPTIONS: the worker compares digests stored by older producers."""
    options = {"traceparent": "x", "time_limit": 5000, "max_retries": 2, "on_failure": "cleanup", "eta": 1,
               "pipe_target": {"actor_name": "next", "args": [], "kwargs": {},
                               "options": {"workflow_id": "w", "time_limit": 10}}}
    message = {"actor_name": "export", "args": ["acct-1", 3], "kwargs": {"force": True}, "options": options}
    reordered = {**message, "options": dict(reversed(list(options.items())))}
    assert digest(message) == digest(reordered) == "d4528c3861100d4571251032e5a8c4c4"
