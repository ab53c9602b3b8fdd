"""Whether a failover of the store's PostgreSQL can lose commits: the primary's replication settings.

A claim is a commit; with ASYNCHRONOUS replication a standby promoted after the primary died may
not have it. The job is then claimable again on the new primary, and the worker that holds the
lost claim still runs it. reliable's claims take fencing tokens above the new timeline's floor
(see `write_job` in sql/postgresql.sql), so that worker's commits are refused; what a lossy
failover still loses is everything else the lost WAL held (finished jobs run again, recorded
effects are forgotten, so a unit may be applied twice). Only synchronous replication avoids that.

`replication_report` reads, on the server the store connects to, what decides it:
`synchronous_commit` (as the store's own sessions get it: per role/database settings count),
`synchronous_standby_names` and `pg_stat_replication`'s `sync_state` of each connected standby.
`check_replication` turns the report into a warning or, in `require_sync` mode, a ConfigError.
`reliable docs postgresql-failover` explains the settings.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import Engine, event, text

from ..errors import ConfigError, StoreUnavailable
from ..redact import redact_url
from .db import read_connection
from .sessions import read_at_connect
from .sqlrunner import load_queries

__all__ = ["REPLICATION_MODES", "ReplicationMode", "ReplicationReport", "check_mode", "check_replication",
           "parse_sync_names", "refuse_older_timelines", "replication_report"]

logger = logging.getLogger("reliable.store")

ReplicationMode = Literal["warn", "require_sync", "off"]
#: What a worker does at boot about a store whose failover can lose commits (the `replication` option).
REPLICATION_MODES: tuple[ReplicationMode, ...] = ("warn", "require_sync", "off")
#: synchronous_commit levels at which a commit returns before any standby has the WAL.
_LOCAL_COMMIT = frozenset({"off", "local"})
#: sync_state values of a walsender some commits wait for.
_WAITED_FOR = frozenset({"sync", "quorum"})

# Each walsender with what tells a standby from other WAL readers: a logical walsender is
# connected to a database (a physical one is not); pg_receivewal and pg_basebackup (Barman's
# streaming archiver included) report written WAL but never a replay position, which every
# standby's walreceiver sends from its first reply.
_QUERY = text(
    "SELECT pg_is_in_recovery(), current_setting('synchronous_commit'), "
    "current_setting('synchronous_standby_names'), "
    "coalesce((SELECT json_agg(json_build_array(coalesce(r.application_name, ''), coalesce(r.sync_state, ''), "
    "CASE WHEN a.datname IS NOT NULL THEN 'logical' "
    "WHEN r.write_lsn IS NOT NULL AND r.replay_lsn IS NULL THEN 'archiver' ELSE 'standby' END) "
    "ORDER BY r.application_name) "
    "FROM pg_stat_replication r LEFT JOIN pg_stat_activity a ON a.pid = r.pid), '[]'::json)"
)

_SYNC_NAMES = re.compile(r"\s*(?:(?P<method>ANY|FIRST)\s+)?(?:(?P<k>\d+)\s*\((?P<inner>.*)\)|(?P<plain>.*?))\s*",
                         re.IGNORECASE | re.DOTALL)
_NAME = re.compile(r'"(?:[^"]|"")*"|[^,\s]+')


def parse_sync_names(value: str) -> tuple[str, int, tuple[str, ...]]:
    """synchronous_standby_names as (method, count, names): method ANY or FIRST, names lower-cased.

    The forms PostgreSQL knows: ``s1, s2`` (FIRST 1), ``2 (s1, s2)`` (FIRST 2), ``FIRST k (...)``
    and ``ANY k (...)``; a double-quoted name keeps its case. An empty value gives ("FIRST", 0, ()).
    """
    match = _SYNC_NAMES.fullmatch(value)
    if match is None or not value.strip():
        return ("FIRST", 0, ())
    listed = match["inner"] if match["k"] is not None else match["plain"]
    names = tuple(name[1:-1].replace('""', '"') if name.startswith('"') else name.lower()
                  for name in _NAME.findall(listed))
    count = int(match["k"]) if match["k"] is not None else 1
    return ((match["method"] or "FIRST").upper(), count, names)


@dataclass(frozen=True)
class ReplicationReport:
    """The replication settings of the server a store's sessions reach.

    `standbys` holds (application_name, sync_state) for each physical standby connected now
    (sync_state: sync, quorum, potential or async). `others` holds (application_name, sync_state,
    kind) for the walsenders that are not standbys (kind: archiver for pg_receivewal, Barman or
    pg_basebackup; logical for a subscriber): none can be promoted, but a listed one counts
    towards the synchronous standbys a commit waits for.
    """

    in_recovery: bool
    synchronous_commit: str
    synchronous_standby_names: str
    standbys: tuple[tuple[str, str], ...]
    others: tuple[tuple[str, str, str], ...] = ()

    @property
    def notes(self) -> list[str]:
        """The walsenders the verdict leaves out, as they cannot be promoted."""
        return [f"{name or '(unnamed)'} is a {kind} walsender, not a standby: it cannot be promoted"
                for name, _, kind in self.others]

    @property
    def problems(self) -> list[str]:
        """Why a failover of this server could lose commits, or stall them; empty when it cannot.

        Promoting a standby loses no commit only if every commit waited for it: sync_state sync
        under FIRST k, or quorum under ANY k of n with k == n. Any other standby is named.
        """
        found: list[str] = []
        if self.in_recovery:
            found.append("the store's server is a standby in recovery (read-only): connect to the primary, "
                         "e.g. with target_session_attrs=read-write")
        names_setting = self.synchronous_standby_names.strip()
        if not self.standbys and not names_setting:
            return found  # no standby: no failover target that could lack a commit
        if self.synchronous_commit in _LOCAL_COMMIT:
            found.append(f"synchronous_commit is {self.synchronous_commit!r}: a commit returns before any "
                         "standby has it, so a failover can lose committed claims (set it to 'on' or "
                         "'remote_apply')")
        if any(not state for _, state in self.standbys):
            found.append("the store's role cannot see its standbys' sync_state in pg_stat_replication: grant it "
                         "pg_read_all_stats, or check the standbys yourself and use replication='off'")
        if not names_setting:
            unwaited = [f"{name or '(unnamed)'} ({state})" for name, state in self.standbys if state]
            found.append(f"synchronous_standby_names is empty: standby {', '.join(unwaited) or '(not visible)'} is "
                         "asynchronous, so promoting it can lose committed claims")
            return found
        method, count, names = parse_sync_names(names_setting)
        waited = [name for name, state in self.standbys if state in _WAITED_FOR]
        waited += [name for name, state, _ in self.others if state in _WAITED_FOR]
        if len(waited) < count:
            found.append(f"synchronous_standby_names is {names_setting!r}: a commit waits for {count} synchronous "
                         f"standbys but {len(waited)} {'is' if len(waited) == 1 else 'are'} connected "
                         f"({', '.join(waited) or 'none'}): commits wait until enough are")
        all_waited_for = method == "FIRST" or ("*" not in names and count >= len(names))
        for name, state in self.standbys:
            shown = f"{name or '(unnamed)'} ({state})"
            if state in _WAITED_FOR and all_waited_for:
                continue
            if state == "quorum":
                found.append(f"standby {shown}: synchronous_standby_names {names_setting!r} makes a commit wait "
                             f"for any {count} of {'the' if '*' in names else len(names)} listed standbys, so this "
                             "one may lack it and promoting it can lose committed claims (list them as "
                             f"ANY n with n the number of names, or FIRST k)")
            elif state:
                found.append(f"standby {shown} is not synchronous: promoting it can lose committed claims "
                             "(promote only a standby every commit waits for: sync_state sync under FIRST, "
                             "see `reliable docs postgresql-failover`)")
        return found


def replication_report(engine: Engine) -> ReplicationReport | None:
    """The replication settings of the server `engine` connects to; None for SQLite (no replicas).

    Raises StoreUnavailable when the server cannot be reached.
    """
    if engine.dialect.name != "postgresql":
        return None
    with read_connection(engine) as conn:
        row = conn.execute(_QUERY).one()
    senders = [(str(name), str(state), str(kind)) for name, state, kind in row[3]]
    return ReplicationReport(in_recovery=bool(row[0]), synchronous_commit=str(row[1]),
                             synchronous_standby_names=str(row[2]),
                             standbys=tuple((name, state) for name, state, kind in senders if kind == "standby"),
                             others=tuple(sender for sender in senders if sender[2] != "standby"))


def check_mode(mode: str) -> ReplicationMode:
    """`mode` if it is one of REPLICATION_MODES; ConfigError naming the option otherwise."""
    for known in REPLICATION_MODES:
        if mode == known:
            return known
    raise ConfigError(f"replication must be one of {', '.join(REPLICATION_MODES)}, not {mode!r}")


def check_replication(engine: Engine, mode: ReplicationMode = "warn") -> ReplicationReport | None:
    """Check that a failover of the store cannot lose commits: warn (`warn`), refuse (`require_sync`).

    Returns the report (None for SQLite or with mode `off`). In `require_sync` mode any problem
    raises ConfigError naming it and the store (password hidden). StoreUnavailable propagates.
    """
    if check_mode(mode) == "off":
        return None
    report = replication_report(engine)
    if report is None:
        return report
    for note in report.notes:
        logger.info("the store at %s: %s", redact_url(engine.url), note)
    if not report.problems:
        return report
    where = redact_url(engine.url)
    message = f"the store at {where} can lose commits in a failover: " + "; ".join(report.problems)
    if mode == "require_sync":
        raise ConfigError(message + " (replication='require_sync'; see `reliable docs postgresql-failover`)")
    logger.warning("%s (see `reliable docs postgresql-failover`)", message)
    return report


def refuse_older_timelines(engine: Engine) -> None:
    """Refuse, at connect, a primary on an older WAL timeline than one this engine already used.

    After a failover the old primary may come back writable (restarted by a supervisor, say) on
    the timeline the promoted standby left. libpq's target_session_attrs=read-write accepts it,
    and it is first in the URL. Writing there would give this process a second copy of the store,
    and its tokens sit below the new primary's floor. A process that has used the newer timeline
    refuses it instead: StoreUnavailable naming both timelines and what to do, so its writes wait
    until an operator takes that server out of the URL or rewinds it into a standby. A process that
    never used the newer timeline cannot tell (`reliable docs postgresql-failover`): the guard is per process.

    Timelines are compared within one cluster (system identifier): a standby shares its primary's,
    while pg_upgrade or a restore into a new cluster makes a new one starting at timeline 1, which is
    accepted with a warning to raise the lease floor (`reliable db raise-lease-floor`).
    """
    if engine.dialect.name != "postgresql":
        return
    query = load_queries("postgresql")["server_timeline"]
    highest: dict[int, int] = {}
    lock = threading.Lock()

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        timeline, system = read_at_connect(dbapi_conn, query)
        if timeline is None:  # a standby: it takes no writes, so it can split nothing
            return
        where = redact_url(engine.url)
        with lock:
            if timeline < highest.get(system, 0):
                raise StoreUnavailable(
                    f"cannot use the store at {where}: the primary it connected to is on WAL timeline {timeline}, "
                    f"older than timeline {highest[system]} of the same cluster this process already wrote to: an "
                    "old primary is back after a failover. Stop it and take it out of the URL, or rewind it into a "
                    "standby (pg_rewind); if it is the only server left, restart this process after running "
                    "`reliable db raise-lease-floor --above-timeline "
                    f"{highest[system]}` on it (`reliable docs postgresql-failover`)")
            if highest and system not in highest:
                logger.warning(
                    "the store at %s is now a different PostgreSQL cluster (system identifier %s, timeline %s): "
                    "after pg_upgrade or a move to a new cluster, run `reliable db raise-lease-floor "
                    "--above-timeline %s` and restart the workers, or a lossy failover can reissue a fencing "
                    "token (`reliable docs postgresql-failover`)", where, system, timeline, max(highest.values()))
            highest[system] = max(timeline, highest.get(system, 0))
