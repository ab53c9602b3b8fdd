"""The operators' audit trails other than the jobs' (a worker process's, an actor's limit's, a
queue's) are tables of one shape (`metadata.audit_table`), the shape `audit_trail.AuditEntry` reads.
That the migrations create them so is test_alert_schema's `test_migrated_database_matches_metadata`."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import Table

from reliable.store.audit_trail import AuditEntry
from reliable.store.schema import limit_events, process_events, queue_events


@pytest.mark.parametrize(("table", "subject"), [(process_events, "worker_id"), (limit_events, "name"),
                                                 (queue_events, "queue")])
def test_each_audit_trail_is_an_audit_entry_keyed_by_its_subject(table: Table, subject: str) -> None:
    fields = [f.name for f in dataclasses.fields(AuditEntry)]
    assert [c.name for c in table.columns] == [subject if f == "subject" else f for f in fields]
    assert not table.c[subject].nullable and table.c.id.primary_key
