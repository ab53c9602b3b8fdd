"""Bulk operations of the API: filter -> count and a confirmation -> confirm -> run with progress."""

from __future__ import annotations

from starlette.routing import BaseRoute

__all__ = ["routes"]


def routes() -> list[BaseRoute]:
    """The bulk operations' routes."""
    return []
