"""SQLAlchemy's private pool-wide invalidation.

`Pool._invalidate(connection, exception)` is what SQLAlchemy itself calls on a disconnect: the
connection is dropped and every connection opened before now is recycled at its next checkout.
Read in SQLAlchemy 2.0.0, 2.0.30, 2.0.44 and 2.1.0b1 (tags), tested on the installed 2.1. Fallback:
only this connection is invalidated (`PoolProxiedConnection.invalidate`, public); the others
report the restart themselves when next used.
"""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

from . import release

__all__ = ["SQLALCHEMY_VERIFIED", "VERIFIED_SQLALCHEMY", "invalidate_all"]

#: The SQLAlchemy releases whose Pool has `_invalidate(connection, exception)`.
VERIFIED_SQLALCHEMY = frozenset({"2.0", "2.1"})
#: The installed SQLAlchemy is one of them.
SQLALCHEMY_VERIFIED = release(version("SQLAlchemy")) in VERIFIED_SQLALCHEMY


def invalidate_all(pool: Any, connection: Any, exception: BaseException) -> None:
    """Drop `connection` (checked out of `pool`) after `exception`, and recycle every connection of
    `pool` opened before now at its next checkout."""
    if SQLALCHEMY_VERIFIED:
        pool._invalidate(connection, exception)
    else:
        connection.invalidate(exception)
