"""The fencing floor an operator raises on PostgreSQL: `reliable db raise-lease-floor`.

A claim's token is at least reliable.lease_floor (a database setting, read by each new session)
plus the WAL timeline's floor, (timeline - 1) << 40 (sql/postgresql.sql, write_job). The timeline
alone keeps tokens rising across failovers of one cluster; it stops doing so when the timeline
goes back (pg_upgrade restarts it at 1, a move to a new cluster too) or a promotion reuses a
timeline number another server already wrote on. Raising the floor above every timeline used so far
restores the order. Tokens a timeline issues stay below timeline << 40.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine
from sqlalchemy.exc import ProgrammingError

from ..errors import ConfigError
from .db import write_transaction
from .sqlrunner import load_queries

__all__ = ["LeaseFloor", "raise_lease_floor"]

#: A timeline's share of the token space: tokens issued on timeline t stay below t << TIMELINE_SHIFT.
TIMELINE_SHIFT = 40
_INSUFFICIENT_PRIVILEGE = "42501"


@dataclass(frozen=True)
class LeaseFloor:
    """The result of raising the floor: the database, its timeline and the floor before and after."""

    database: str
    timeline: int
    before: int
    after: int

    @property
    def lowest_next_token(self) -> int:
        """The smallest token a claim can take from now on (in a session started after the raise)."""
        return self.after + ((self.timeline - 1) << TIMELINE_SHIFT)


def raise_lease_floor(engine: Engine, above_timeline: int) -> LeaseFloor:
    """Raise the database's reliable.lease_floor above every token issued so far; never lower it.

    The new floor is above every token of a timeline up to `above_timeline` (the highest timeline
    any server of the store ever ran on, which the store cannot know when that server's WAL was
    lost) under the floor as it stood, and above the highest token in the store (which covers a
    floor setting lost in a move). Each run raises it again: run it once per event (it is safe to
    repeat, it only spends token space: 2^23 timelines' worth). Sessions that
    are already open keep the old floor: restart the workers. ConfigError on SQLite, on a standby,
    or when the store's role may not set the parameter (a custom one: superuser, or the database's
    owner with SET granted on it).
    """
    if engine.dialect.name != "postgresql":
        raise ConfigError("raise-lease-floor is for a PostgreSQL store: SQLite has no failover")
    if above_timeline < 1:
        raise ConfigError(f"--above-timeline must be a timeline (1 or more), not {above_timeline}")
    with write_transaction(engine) as conn:
        database, in_recovery, timeline, highest, before = conn.exec_driver_sql(
            load_queries("postgresql")["lease_floor_state"]).one()
        if in_recovery:
            raise ConfigError(f"database {database} is on a standby in recovery: run this on the primary")
        # Tokens of timelines up to `above_timeline` were issued under the floor as it stands.
        after = max(int(before) + (above_timeline << TIMELINE_SHIFT),
                    ((int(highest) >> TIMELINE_SHIFT) + 1) << TIMELINE_SHIFT)
        quoted = engine.dialect.identifier_preparer.quote(str(database))
        try:
            conn.exec_driver_sql(f"ALTER DATABASE {quoted} SET reliable.lease_floor = '{after}'")
        except ProgrammingError as exc:
            if getattr(exc.orig, "sqlstate", None) != _INSUFFICIENT_PRIVILEGE:
                raise
            raise ConfigError(f"the store's role may not set reliable.lease_floor on database {database}: run this "
                              "with a superuser's store URL, or GRANT SET ON PARAMETER reliable.lease_floor TO the "
                              "role (PostgreSQL 15+) and make it the database's owner") from None
    return LeaseFloor(database=str(database), timeline=int(timeline), before=int(before), after=after)
