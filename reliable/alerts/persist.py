"""Keep alert states in `reliable_alerts` (read all, upsert changed, delete finished)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, insert, select, update

from ..store import StateStore
from ..store.schema import alerts
from .lifecycle import AlertState

__all__ = ["delete_alerts", "load_alerts", "save_alerts"]


def _row(state: AlertState) -> dict[str, Any]:
    return {
        "fingerprint": state.fingerprint, "alertname": state.alertname,
        "labels": json.dumps(dict(state.labels), sort_keys=True),
        "annotations": json.dumps(dict(state.annotations), sort_keys=True), "state": state.state,
        "pending_since": state.pending_since, "starts_at": state.starts_at, "ends_at": state.ends_at,
        "last_evaluated_at": state.last_evaluated_at, "last_sent_at": state.last_sent_at,
        "next_send_at": state.next_send_at, "send_attempts": state.send_attempts, "last_error": state.last_error,
    }


def _state(row: Mapping[Any, Any]) -> AlertState:
    values = dict(row)
    values["labels"] = json.loads(values["labels"])
    values["annotations"] = json.loads(values["annotations"])
    return AlertState(**values)


def load_alerts(store: StateStore) -> dict[str, AlertState]:
    """Every alert row, by fingerprint."""
    with store.read() as conn:
        return {row["fingerprint"]: _state(row) for row in conn.execute(select(alerts)).mappings()}


def save_alerts(store: StateStore, states: Iterable[AlertState], deleted: Iterable[str] = ()) -> None:
    """Upsert `states` and delete the `deleted` fingerprints, in one transaction."""
    rows = [_row(s) for s in states]
    gone = list(deleted)
    if not rows and not gone:
        return
    with store.write() as conn:
        for row in rows:
            values = {k: v for k, v in row.items() if k != "fingerprint"}
            result = conn.execute(update(alerts).where(alerts.c.fingerprint == row["fingerprint"]).values(**values))
            if not result.rowcount:
                conn.execute(insert(alerts).values(**row))
        if gone:
            conn.execute(delete(alerts).where(alerts.c.fingerprint.in_(gone)))


def delete_alerts(store: StateStore, fingerprints: Iterable[str]) -> None:
    """Delete the given alert rows."""
    save_alerts(store, (), fingerprints)
