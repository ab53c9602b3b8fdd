"""The API tokens' table, `reliable_api_tokens` (`reliable.access.ApiTokens` keeps the rules: who
may have a token, how a secret is checked). Rows are returned as read, with attribute access."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Row, select, update

from .core import StoreCore
from .schema import api_tokens

__all__ = ["insert_token", "revoke_token", "token_row", "token_rows", "touch_token"]


def insert_token(store: StoreCore, row: Mapping[str, Any]) -> None:
    """Insert one token row."""
    with store.write() as conn:
        conn.execute(api_tokens.insert().values(**row))


def token_row(store: StoreCore, token_id: str) -> Row[Any] | None:
    """The row of the token `token_id`, or None."""
    with store.read() as conn:
        return conn.execute(select(api_tokens).where(api_tokens.c.token_id == token_id)).first()


def token_rows(store: StoreCore) -> list[Row[Any]]:
    """Every token row, newest first."""
    with store.read() as conn:
        return list(conn.execute(select(api_tokens).order_by(api_tokens.c.created_at.desc())).all())


def revoke_token(store: StoreCore, token_id: str, *, by: str | None) -> None:
    """Mark the token revoked now (the database's clock), by `by`."""
    with store.write() as conn:
        conn.execute(update(api_tokens).where(api_tokens.c.token_id == token_id)
                     .values(revoked_at=store.now_sql, revoked_by=by))


def touch_token(store: StoreCore, token_id: str, at: float) -> None:
    """Record that the token was used at `at`."""
    with store.write() as conn:
        conn.execute(update(api_tokens).where(api_tokens.c.token_id == token_id).values(last_used_at=at))
