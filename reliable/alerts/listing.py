"""Every alert in one list: the store evaluator's rows and what Alertmanager holds (Prometheus' alerts
and anyone else's), each with its source. Pure.

A store alert Alertmanager also holds (the same label set: Alertmanager dedups by labels) is listed
once, as the store's, marked `in_alertmanager`. An Alertmanager alert no store row has is listed
with `source` "prometheus" (its generatorURL names the Prometheus expression) or "alertmanager"
(sent by something else), `state` "firing" (active) or "suppressed" (silenced or inhibited).

`page_alerts` orders the list (firing first, then pending, suppressed, resolved; the newest first in
each; source and fingerprint break ties, so the order is total) and cuts a page after a cursor: the
last row's sort key, opaque to callers. Alertmanager has no paging of its own, so each page is cut
from the whole merged list (read once per request, as before).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..errors import ConfigError
from ..isotime import parse_time_text
from .lifecycle import bounded_labels
from .model import fingerprint

__all__ = ["ORDER", "SOURCES", "merge_alerts", "page_alerts"]

#: The order alerts are listed in: firing first.
ORDER = ("firing", "pending", "suppressed", "resolved")

#: Where a listed alert comes from.
SOURCES = ("store", "prometheus", "alertmanager")
_FRACTION = re.compile(r"(\.\d{6})\d+")


def _epoch(text: Any) -> float | None:
    """Alertmanager's RFC 3339 time (nanoseconds allowed) as epoch seconds; None when absent or odd."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_time_text(_FRACTION.sub(r"\1", text)).timestamp()
    except ValueError:
        return None


def _from_alertmanager(alert: Mapping[str, Any]) -> dict[str, Any]:
    labels = {str(k): str(v) for k, v in alert["labels"].items()}
    status = alert.get("status") or {}
    active = status.get("state", "active") == "active"
    return {"fingerprint": fingerprint(labels), "alertname": labels.get("alertname", ""),
            "state": "firing" if active else "suppressed", "labels": labels,
            "annotations": {str(k): str(v) for k, v in (alert.get("annotations") or {}).items()},
            "starts_at": _epoch(alert.get("startsAt")), "pending_since": None, "ends_at": None,
            "source": "prometheus" if alert.get("generatorURL") else "alertmanager",
            "generator_url": alert.get("generatorURL") or None, "in_alertmanager": True}


def merge_alerts(store_rows: Iterable[Mapping[str, Any]],
                 held: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """The store's rows (source "store") and the alerts Alertmanager holds (`held`, as GET
    /api/v2/alerts returns them; None: Alertmanager not read) that are not the store's, in one list.
    `in_alertmanager` of a store row: whether Alertmanager holds it (None when it was not read)."""
    held_rows = [_from_alertmanager(alert) for alert in held or ()]
    held_prints = {row["fingerprint"] for row in held_rows}
    out: list[dict[str, Any]] = []
    mine: set[str] = set()
    for row in store_rows:
        labels = dict(row.get("labels") or {})
        prints = {fingerprint(labels), fingerprint(bounded_labels(labels))}
        mine |= prints
        out.append({**row, "source": "store", "generator_url": None,
                    "in_alertmanager": None if held is None else bool(prints & held_prints)})
    out.extend(row for row in held_rows if row["fingerprint"] not in mine)
    return out


def _key(row: Mapping[str, Any]) -> tuple[int, float, str, str]:
    state = row.get("state")
    return (ORDER.index(state) if state in ORDER else len(ORDER),
            -float(row.get("starts_at") or row.get("pending_since") or 0.0), str(row.get("source") or ""),
            str(row.get("fingerprint") or ""))


def _cursor(key: tuple[int, float, str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(key)).encode()).decode().rstrip("=")


def _after(cursor: str) -> tuple[int, float, str, str]:
    try:
        rank, start, source, print_ = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        return int(rank), float(start), str(source), str(print_)
    except (ValueError, TypeError, binascii.Error, OverflowError, RecursionError):  # a tampered cursor
        raise ConfigError(f"parameter 'cursor': {cursor!r} is not a next_cursor of the alerts listing") from None


def page_alerts(alerts: Sequence[Mapping[str, Any]], *, limit: int,
                cursor: str | None = None) -> tuple[list[dict[str, Any]], str | None]:
    """The page of `alerts` after `cursor` (None: the first), at most `limit` rows in the listing's
    order, and the next page's cursor (None on the last page). ConfigError naming 'cursor' for a
    cursor this function did not make."""
    after = None if cursor is None else _after(cursor)
    ordered = sorted(alerts, key=_key)
    rows = [dict(row) for row in ordered if after is None or _key(row) > after]
    page = rows[:limit]
    return page, _cursor(_key(page[-1])) if len(rows) > limit else None
