"""`reliable.disclosure`: every field of every record a surface shows has a kind, every kind a rule.

A field added to Job, JobEvent, Attempt or Effect without a kind in the registries fails here
(and, until it gets one, is masked whole for a reader who does not see secrets).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from reliable.disclosure import (
    ATTEMPT_FIELDS,
    EFFECT_FIELDS,
    EVENT_FIELDS,
    JOB_FIELDS,
    Audience,
    Kind,
    disclose,
    disclose_json_text,
    disclose_record,
    disclosed,
)
from reliable.policy import Failure, Policy
from reliable.redact import MASK
from reliable.store import Attempt, Effect, Job, JobEvent

SECRET = "hunter2-zz"
MASKED = Audience("viewer", False)
ADMIN = Audience("admin", True)

#: One value of each kind that quotes SECRET, the way it is stored.
SAMPLES: dict[Kind, Any] = {
    Kind.ARGUMENTS: {"args": [f"password={SECRET}"], "kwargs": {"api_key": SECRET, "amount": 3}, "options": {}},
    Kind.CHECKPOINT: {"api_token": SECRET, "cursor": 12},
    Kind.ERROR_TEXT: f"charge declined password={SECRET}",
    Kind.TRACEBACK: f"Traceback ...\nValueError: charge declined password={SECRET}\n",
    Kind.EVENT_DETAIL: {"action": "fail", "message": f"charge declined password={SECRET}"},
    Kind.EFFECT_RESULT: {"receipt": {"token": SECRET}},
}


@pytest.mark.parametrize(("record", "fields", "extra"), [
    (Job, JOB_FIELDS, set()), (JobEvent, EVENT_FIELDS, set()),
    (Attempt, ATTEMPT_FIELDS, {"traceback"}),  # the job page adds each failed attempt's traceback
    (Effect, EFFECT_FIELDS, set()),
], ids=["job", "event", "attempt", "effect"])
def test_every_field_of_every_record_has_a_kind(record: type, fields: dict[str, Kind], extra: set[str]) -> None:
    declared = {f.name for f in dataclasses.fields(record)} | extra
    assert set(fields) == declared, (f"{record.__name__}: fields without a kind: {sorted(declared - set(fields))}; "
                                     f"kinds without a field: {sorted(set(fields) - declared)}")


def test_every_kind_that_carries_values_has_a_sample_and_a_rule() -> None:
    assert set(SAMPLES) == set(Kind) - {Kind.PUBLIC}
    for kind, value in SAMPLES.items():
        shown = repr(disclose(value, kind, MASKED))
        assert SECRET not in shown and MASK in shown, (kind, shown)
        assert disclose(value, kind, ADMIN) == value
        assert disclose(None, kind, MASKED) is None
    assert disclose(f"password={SECRET}", Kind.PUBLIC, MASKED) == f"password={SECRET}"


def test_a_record_field_nobody_declared_is_masked_whole() -> None:
    shown = disclose_record({"job_id": "j", "surprise": SECRET, "none": None}, JOB_FIELDS, MASKED)
    assert shown == {"job_id": "j", "surprise": MASK, "none": None}
    assert disclose_record({"surprise": SECRET}, JOB_FIELDS, ADMIN) == {"surprise": SECRET}


def test_the_deployments_patterns_mask_keys_and_text() -> None:
    audience = Audience("viewer", False, ("holder_*",))
    assert disclose({"holder_name": "Alice", "nested": [{"iban": "DE12"}]}, Kind.ARGUMENTS, audience) == {
        "holder_name": MASK, "nested": [{"iban": MASK}]}
    assert disclose("holder_name=Alice amount=3", Kind.ERROR_TEXT, Audience("viewer", False, ("holder_name",))) \
        == f"holder_name={MASK} amount=3"


def test_a_checkpoint_kept_as_json_text_is_parsed_or_masked_whole() -> None:
    text = f'{{"api_token": "{SECRET}", "page": 3}}'
    assert disclose_json_text(text, Kind.CHECKPOINT, MASKED) == '{"api_token": "***", "page": 3}'
    assert disclose_json_text(text[:20] + "…", Kind.CHECKPOINT, MASKED) == MASK  # cut short: nothing shown
    assert disclose_json_text(text, Kind.CHECKPOINT, ADMIN) == text
    assert disclose_json_text(None, Kind.CHECKPOINT, MASKED) is None


def test_a_dataclass_record_keeps_its_type() -> None:
    event = JobEvent(1, "j", 0.0, "fail", "RUNNING", "FAILED", 2, 1, "a", 1, "w", "q", "act", None, None,
                     "permanent", "ValueError", f"password={SECRET}", 0, {"api_token": SECRET}, None, None, None,
                     detail={"message": f"declined password={SECRET}"}, traceback=None)
    shown = disclosed(event, EVENT_FIELDS, MASKED)
    assert isinstance(shown, JobEvent) and SECRET not in repr(shown) and shown.job_id == "j"
    assert disclosed(event, EVENT_FIELDS, ADMIN) is event


def test_the_policy_masks_the_message_it_puts_in_the_event_detail() -> None:
    """The measured defect's write side: the `fail` event's detail.message was the raw exception text."""
    policy = Policy.load(None)
    decision = policy.decide(Failure(exception=ValueError(f"charge declined password={SECRET}"), actor="charge",
                                     queue="billing", attempt=1, retry_count=0,
                                     contract=policy.contract("charge", "billing"), now=0.0, rand=lambda: 0.5))
    assert SECRET not in repr(decision.as_detail()) and f"password={MASK}" in str(decision.message)
