"""The `reliable_alerts` table: every alert's lifecycle and delivery state, so none is lost.

Defined on the store's own `metadata` (migration 0002 creates it), so that metadata and the
migrated database agree whenever this module is imported.
"""

from __future__ import annotations

from sqlalchemy import Column, Double, Index, Integer, String, Table, Text

from ..store.schema import metadata

__all__ = ["alerts"]

alerts = Table(
    "reliable_alerts",
    metadata,
    Column("fingerprint", String(64), primary_key=True),  # hash of the label set
    Column("alertname", String(255), nullable=False),
    Column("labels", Text, nullable=False),  # JSON object
    Column("annotations", Text, nullable=False),  # JSON object
    Column("state", String(16), nullable=False),  # pending | firing | resolved
    Column("pending_since", Double),
    Column("starts_at", Double),
    Column("ends_at", Double),
    Column("last_evaluated_at", Double),
    Column("last_sent_at", Double),
    Column("next_send_at", Double),
    Column("send_attempts", Integer, nullable=False, server_default="0"),
    Column("last_error", Text),
)

Index("ix_reliable_alerts_state_next_send", alerts.c.state, alerts.c.next_send_at)
Index("ix_reliable_alerts_alertname", alerts.c.alertname)
