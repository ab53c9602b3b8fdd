"""Keep alert states in the store (`reliable.store.alert_rows`): read all, upsert changed, delete finished."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict
from typing import Any

from ..store import StoreCore
from ..store.alert_rows import alert_rows, save_alert_rows
from .lifecycle import AlertState

__all__ = ["delete_alerts", "load_alerts", "save_alerts"]


def _state(row: Mapping[str, Any]) -> AlertState:
    return AlertState(**row)


def load_alerts(store: StoreCore) -> dict[str, AlertState]:
    """Every alert row, by fingerprint."""
    return {row["fingerprint"]: _state(row) for row in alert_rows(store)}


def save_alerts(store: StoreCore, states: Iterable[AlertState], deleted: Iterable[str] = ()) -> None:
    """Upsert `states` and delete the `deleted` fingerprints, in one transaction."""
    save_alert_rows(store, [asdict(state) for state in states], deleted)


def delete_alerts(store: StoreCore, fingerprints: Iterable[str]) -> None:
    """Delete the given alert rows."""
    save_alerts(store, (), fingerprints)
