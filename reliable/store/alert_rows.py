"""The alert evaluator's table, `reliable_alerts`: one row per alert (label set), read whole and
upserted in one transaction.

Rows are plain mappings with `labels` and `annotations` as dicts (stored as JSON text, keys
sorted); `reliable.alerts.persist` turns them into `AlertState` values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, insert, select, update

from ..inputs import storable
from .core import StoreCore
from .schema import alerts

__all__ = ["alert_rows", "save_alert_rows"]

_JSON_COLUMNS = ("labels", "annotations")


def alert_rows(store: StoreCore, *, state: str | None = None) -> list[dict[str, Any]]:
    """Every alert row (only those in `state` when given), by alert name then fingerprint."""
    stmt = select(alerts).order_by(alerts.c.alertname, alerts.c.fingerprint)
    if state:
        stmt = stmt.where(alerts.c.state == state)
    with store.read() as conn:
        rows = [dict(row) for row in conn.execute(stmt).mappings()]
    for row in rows:
        for name in _JSON_COLUMNS:
            row[name] = json.loads(row[name]) if row[name] else {}
    return rows


def save_alert_rows(store: StoreCore, rows: Iterable[Mapping[str, Any]], deleted: Iterable[str] = ()) -> None:
    """Upsert `rows` (keyed by `fingerprint`) and delete the `deleted` fingerprints, in one transaction; a
    delivery's `last_error` (an exception's text) made storable first (`inputs.storable`)."""
    encoded = [{**row, **{name: json.dumps(dict(row[name]), sort_keys=True) for name in _JSON_COLUMNS},
                **({"last_error": storable(row["last_error"])} if row.get("last_error") is not None else {})}
               for row in rows]
    gone = list(deleted)
    if not encoded and not gone:
        return
    with store.write() as conn:
        for row in encoded:
            values = {k: v for k, v in row.items() if k != "fingerprint"}
            result = conn.execute(update(alerts).where(alerts.c.fingerprint == row["fingerprint"]).values(**values))
            if not result.rowcount:
                conn.execute(insert(alerts).values(**row))
        if gone:
            conn.execute(delete(alerts).where(alerts.c.fingerprint.in_(gone)))
