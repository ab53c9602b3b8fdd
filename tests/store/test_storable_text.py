"""Text the store can hold (issue 38): every free text of a job write passes `reliable.inputs.storable`,
so a lone surrogate (a non-UTF-8 file name in an exception message) or a NUL is stored escaped and a
failure is always recorded as a failure, on SQLite and PostgreSQL."""

from __future__ import annotations

import typing

import pytest

from reliable.inputs import MAX_STORED_TEXT, storable
from reliable.states import Event, JobStatus
from reliable.store import ErrorInfo, NewJob, StateStore
from reliable.store.alert_rows import alert_rows, save_alert_rows
from reliable.store.bulk_operations import insert_operation, mark_operation, operation_row, write_progress
from reliable.store.schema import alerts
from reliable.store.writes import FREE_TEXT, NOT_FREE_TEXT, JobWrite, event_write, transition_write

#: What `os.fsdecode` gives for a file name that is not UTF-8, and what PostgreSQL refuses.
NASTY = "cannot open '\udcffreport.csv'\x00 here"
ESCAPED = "cannot open '\\udcffreport.csv'\\x00 here"


def _text_fields() -> set[str]:
    hints = typing.get_type_hints(JobWrite)
    return {name for name, hint in hints.items() if hint in (str, str | None)}


def test_every_text_field_of_a_write_is_declared_free_or_not() -> None:
    """A new text field of JobWrite must be put in FREE_TEXT (escaped) or NOT_FREE_TEXT (with why)."""
    fields = _text_fields()
    assert set(FREE_TEXT).isdisjoint(NOT_FREE_TEXT)
    assert fields == set(FREE_TEXT) | set(NOT_FREE_TEXT), fields ^ (set(FREE_TEXT) | set(NOT_FREE_TEXT))


@pytest.mark.parametrize("field", FREE_TEXT)
def test_every_constructor_makes_each_free_text_storable(field: str) -> None:
    """Both constructors of a write (a transition, an event) escape and bound every free text."""
    error_keys = {"error_class": "error_class", "error_type": "error_type", "error_message": "message",
                  "traceback": "traceback"}
    long = "y" * (MAX_STORED_TEXT + 10)
    for value, expected in ((NASTY, ESCAPED), (long, storable(long))):
        if field in error_keys:
            kwargs: dict[str, typing.Any] = {"error": {error_keys[field]: value}}
        else:
            kwargs = {field: value}
        writes: list[JobWrite] = [
            transition_write("j", Event.FAIL, lease_id=1, worker_id="w", **kwargs),
            event_write("j", "note", **kwargs),
        ]
        for write in writes:
            stored = getattr(write, field)
            assert stored == expected
            assert len(stored) <= MAX_STORED_TEXT
            stored.encode("utf-8")  # no lone surrogate left
            assert "\x00" not in stored


def test_storable_keeps_plain_text_and_marks_a_cut() -> None:
    assert storable(None) is None
    assert storable("plain\ttext\n") == "plain\ttext\n"
    cut = storable("x" * 1000, 100)
    assert cut is not None and len(cut) <= 100 and cut.endswith("more chars]") and cut.startswith("xxx")


def test_a_failure_whose_message_holds_a_lone_surrogate_is_recorded(store: StateStore) -> None:
    store.register(NewJob("job-s", "default", "export", {"args": []}))
    claim = store.claim("job-s", worker_id="w1", lease_ttl=30)
    error = ErrorInfo("transient", "FileNotFoundError", NASTY, traceback=f"Traceback ...\n{NASTY}\n")
    job = store.finish("job-s", claim.lease_id, Event.FAIL, worker_id="w1", error=error)

    assert job.status is JobStatus.FAILED
    assert store.get("job-s").last_error_message == ESCAPED
    assert store.get("job-s").last_error_type == "FileNotFoundError"
    failed = store.events("job-s")[-1]
    assert (failed.event, failed.error_type, failed.error_message) == ("fail", "FileNotFoundError", ESCAPED)
    assert failed.traceback == f"Traceback ...\n{ESCAPED}\n"
    store.record_event("job-s", "note", reason=NASTY, operator="al\udcffce")
    note = store.events("job-s")[-1]
    assert (note.reason, note.operator) == (ESCAPED, "al\\udcffce")


def _operation(store: StateStore, operation_id: str) -> None:
    now = store.now()
    insert_operation(store, {"operation_id": operation_id, "command": "retry", "filter": "{}", "job_ids": "[]",
                             "options": "{}", "reason": "r", "operator": "al", "status": "running", "total": 0,
                             "created_at": now, "expires_at": now + 900, "updated_at": now})


def test_an_operations_error_from_an_exception_is_stored(store: StateStore) -> None:
    """A bulk run that broke on an exception whose text holds a lone surrogate and a NUL ends as
    recorded, its error escaped, by either way an operation ends."""
    _operation(store, "op-run")
    assert write_progress(store, "op-run", {"done": 0, "status": "failed", "error": f"the run broke: {NASTY}"})
    row = operation_row(store, "op-run")
    assert row is not None and (row.status, row.error) == ("failed", f"the run broke: {ESCAPED}")

    _operation(store, "op-old")
    updated_at = operation_row(store, "op-old").updated_at  # type: ignore[union-attr]
    mark_operation(store, "op-old", was="running", updated_at=updated_at, status="interrupted", error=NASTY,
                   at=store.now())
    row = operation_row(store, "op-old")
    assert row is not None and (row.status, row.error) == ("interrupted", ESCAPED)


def test_an_alerts_delivery_error_is_stored(store: StateStore) -> None:
    """Alertmanager's answer (an exception's text) kept as an alert's last_error, escaped."""
    now = store.now()
    row = {"fingerprint": "f" * 64, "alertname": "ReliableJobsStuck", "labels": {"alertname": "ReliableJobsStuck"},
           "annotations": {}, "state": "firing", "send_attempts": 1, "last_error": NASTY}
    for name in ("started_at", "updated_at"):
        if name in alerts.c:
            row[name] = now
    save_alert_rows(store, [row])
    saved = alert_rows(store)
    assert [r["last_error"] for r in saved] == [ESCAPED]
