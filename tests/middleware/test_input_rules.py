"""What a message may be (issue 30 items 3 and 6, issue 25 item 4): one job id rule and one size
limit (reliable.inputs), applied at registration on both stores.

- `send()` of a message whose id breaks the rule (not a string, empty, longer than 255 characters,
  a control character) or whose JSON is larger than MAX_MESSAGE_BYTES raises MessageRefused
  naming the field; nothing is registered or published.
- Business ids are accepted whole: `"invoice-" + sha256` (72 characters), 255 characters, ids
  with `/ ? # %` and spaces.
- A foreign message (published without reliable) that breaks a rule is never acknowledged into
  nothing: it is dead-lettered, counted (reliable_delivery_mismatches_total) and logged as a
  `delivery_mismatch` record with its id cut; no job row.

On SQLite and PostgreSQL with Dramatiq's StubBroker and a real Worker; tests/integration/
test_input_rules_rabbitmq.py runs the foreign case with a real `dramatiq` worker on RabbitMQ.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dramatiq
import pytest
from prometheus_client import REGISTRY

import reliable
from reliable.inputs import MAX_JOB_ID, MAX_MESSAGE_BYTES
from reliable.states import JobStatus

from middleware_harness import Harness, make_harness


@pytest.fixture
def setup(store_url: str, policy_file: Path) -> Iterator[Harness]:
    made = make_harness(store_url, policy_file, json_logs=True)
    yield made
    made.close()


def declare(ran: list[Any]) -> dramatiq.Actor[Any, Any]:
    @dramatiq.actor(actor_name="bill")
    def bill(payload: str) -> None:
        ran.append(len(payload))

    return bill


GOOD_IDS = {
    "invoice-sha256": "invoice-" + hashlib.sha256(b"42").hexdigest(),
    "longest": "x" * MAX_JOB_ID,
    "slashes": "invoice/2026/42",
    "url characters": "a?b#c%2Fd e&f=g+h",
    "unicode": "facture-été-№42",
}
BAD_IDS: dict[str, tuple[Any, str]] = {
    "an integer": (42, "must be a string, not int"),
    "empty": ("", "must not be empty"),
    "too long": ("y" * (MAX_JOB_ID + 1), f"at most {MAX_JOB_ID} characters"),
    "a NUL": ("a\x00b", "U+0000 at position 1"),
    "a newline": ("a\nb", "U+000A"),
    "a C1 control": ("a\x85", "U+0085"),
}


def message(bill: dramatiq.Actor[Any, Any], message_id: Any, payload: str = "p",
            **options: Any) -> dramatiq.Message[Any]:
    return dramatiq.Message(queue_name="default", actor_name=bill.actor_name, args=(payload,), kwargs={},
                            options=options, message_id=message_id, message_timestamp=1)


@pytest.mark.parametrize("name", sorted(GOOD_IDS))
def test_business_ids_are_registered_and_run_whole(setup: Harness, name: str) -> None:
    ran: list[Any] = []
    bill = declare(ran)
    job_id = GOOD_IDS[name]
    setup.broker.enqueue(message(bill, job_id))
    setup.run()
    job = setup.store.get(job_id)
    assert (job.job_id, job.status) == (job_id, JobStatus.SUCCEEDED) and ran == [1]


@pytest.mark.parametrize("name", sorted(BAD_IDS))
def test_send_refuses_an_id_that_breaks_the_rule(setup: Harness, name: str) -> None:
    bill = declare([])
    bad, why = BAD_IDS[name]
    with pytest.raises(reliable.MessageRefused, match="message_id") as refused:
        setup.broker.enqueue(message(bill, bad))
    assert refused.value.field == "message_id" and why in str(refused.value)
    assert setup.broker.queues["default"].qsize() == 0
    assert setup.store.find(bad) is None if isinstance(bad, str) and "\x00" not in bad else True


def test_send_refuses_a_message_larger_than_the_limit(setup: Harness) -> None:
    bill = declare([])
    with pytest.raises(reliable.MessageRefused, match="size") as refused:
        bill.send("x" * MAX_MESSAGE_BYTES)
    assert refused.value.field == "size" and str(MAX_MESSAGE_BYTES) in str(refused.value)
    assert setup.broker.queues["default"].qsize() == 0
    fits = bill.send("x" * (MAX_MESSAGE_BYTES - 4096))
    assert setup.store.get(fits.message_id).status is JobStatus.PENDING


def test_group_and_pipeline_ids_follow_the_rule(setup: Harness) -> None:
    """A pipeline's first id becomes its workflow id: a 72-character one fits every column."""
    ran: list[Any] = []
    bill = declare(ran)
    first = message(bill, GOOD_IDS["invoice-sha256"])
    second = message(bill, "second/" + "z" * 200, pipe_ignore=True)
    dramatiq.pipeline([first.copy(), second]).run()
    setup.run()
    setup.join()
    assert setup.store.get(first.message_id).workflow_id == first.message_id
    assert setup.store.get(second.message_id).status is JobStatus.SUCCEEDED and len(ran) == 2


def mismatches() -> float:
    return REGISTRY.get_sample_value("reliable_delivery_mismatches_total",
                                     {"actor": "bill", "queue": "default"}) or 0.0


FOREIGN: dict[str, tuple[Any, str, str]] = {
    "an integer id": (12345, "p", "must be a string"),
    "a 100,000-character id": ("i" * 100_000, "p", f"at most {MAX_JOB_ID} characters"),
    "a NUL in its id": ("nul\x00id", "p", "U+0000"),
    "a message too large": ("big-foreign", "x" * (MAX_MESSAGE_BYTES + 10), "bytes, more than"),
}


@pytest.mark.parametrize("name", sorted(FOREIGN))
def test_a_foreign_message_that_breaks_a_rule_is_dead_lettered_not_lost(
        setup: Harness, name: str, caplog: pytest.LogCaptureFixture) -> None:
    ran: list[Any] = []
    declare(ran)
    job_id, payload, why = FOREIGN[name]
    raw = {"queue_name": "default", "actor_name": "bill", "args": [payload], "kwargs": {}, "options": {},
           "message_id": job_id, "message_timestamp": 1}
    before = mismatches()
    setup.broker.queues["default"].put(json.dumps(raw).encode())
    with caplog.at_level(logging.INFO):
        setup.run()
    assert ran == []
    dead = setup.broker.dead_letters
    assert [m.message_id for m in dead] == [job_id]
    assert mismatches() == before + 1
    records = [r for r in caplog.records if r.name == "reliable.events"
               and getattr(r, "reliable_event", {}).get("event") == "delivery_mismatch"]
    assert len(records) == 1
    record = records[0].reliable_event  # type: ignore[attr-defined]
    assert why in record["reason"] and record["actor"] == "bill" and len(record["job_id"]) <= 240
    for line in caplog.records:  # no line of reliable's repeats a long id whole (Dramatiq's own may)
        assert not line.name.startswith("reliable") or len(line.getMessage()) < 2_000
    if isinstance(job_id, str) and "\x00" not in job_id and len(job_id) <= MAX_JOB_ID:
        assert setup.store.find(job_id) is None
