"""Helpers of the API and console tests."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Tokens", "bearer"]


@dataclass
class Tokens:
    """One token per role (the operator's is scoped to queue 'billing')."""

    viewer: str
    operator: str
    admin: str


def bearer(token: str) -> dict[str, str]:
    """The Authorization header of `token`."""
    return {"Authorization": f"Bearer {token}"}
