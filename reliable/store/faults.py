"""What a store error means for the caller: the one classification every surface uses. Pure.

    CONFIGURATION  waiting cannot help: the URL, the credentials, the database, its schema or the
                   user's rights are wrong. Raised at once (install, send, worker boot, every CLI
                   command), with one line saying what to fix or run.
    OUTAGE         the store is away for now: waiting can help (connection refused or reset, a
                   timeout, the server starting or shutting down, too many connections, a failover
                   to a standby that is still read-only, SQLite's file locked). Waited out: bounded
                   for a producer's send (`send_timeout`), lease-aware for a worker's writes.
    OTHER          neither: a statement failed (a constraint, a bug). Raised at once, never retried.

`classify` takes a driver's exception (psycopg, sqlite3), SQLAlchemy's wrapper of one, or one of
reliable's own store errors (already classified by their type), and returns a `Diagnosis`: the
fault and, for a configuration error, the fix. The rules are the `RULES` table, first match wins:
the server's SQLSTATE when it sent one (its message, which may quote data, is then not read), else
the message (libpq reports a refused login, a missing
database or a starting server as text only, with no SQLSTATE). A host name that does not resolve
counts as an outage: DNS is often briefly unavailable while a platform starts.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from ..errors import StoreMisconfigured, StoreUnavailable

__all__ = ["RULES", "Diagnosis", "Fault", "Rule", "classify", "rolled_back"]


class Fault(enum.Enum):
    """What waiting can do about a store error (see the module doc)."""

    CONFIGURATION = "configuration"
    OUTAGE = "outage"
    OTHER = "other"


@dataclass(frozen=True)
class Diagnosis:
    """A store error's fault and, for a configuration error, what to do (`{url}`: the store's URL)."""

    fault: Fault
    fix: str = ""
    #: The schema is missing or older than the code (the fix is `reliable db upgrade`).
    schema: bool = False


@dataclass(frozen=True)
class Rule:
    """One row of RULES: a match on SQLSTATE prefixes or on the message, and what it means."""

    sqlstates: tuple[str, ...]
    pattern: str
    diagnosis: Diagnosis


UPGRADE = "run `reliable db upgrade --store {url}`"
CREDENTIALS = "check the user and password in the store URL (and the server's pg_hba.conf)"
DATABASE = ("the store URL names a database that does not exist: fix its name, or create it and "
            "run `reliable db upgrade --store {url}`")
RIGHTS = ("the store URL's user lacks rights on reliable's tables or file: grant them (docs/operations.md, "
          "\"Database rights\") or use the user that ran `reliable db upgrade`")
POOLER = ("a connection pooler (PgBouncer?) is in the way and the store URL does not say so: add pooled=true "
          "to it (and no `options`), give reliable's role its session settings on the server, or connect to "
          "PostgreSQL directly (`reliable docs pgbouncer`)")
SQLITE_FILE = "the SQLite file cannot be opened: check that its directory exists and is writable by this user"

_SCHEMA = Diagnosis(Fault.CONFIGURATION, UPGRADE, schema=True)
_OUTAGE = Diagnosis(Fault.OUTAGE)

#: First match wins. SQLSTATE classes: 08 connection exception, 28 invalid authorization, 3D invalid
#: catalog (database), 42501 insufficient privilege, 42P01 undefined table, 26000/42P05 a prepared
#: statement missing or there twice (a pooler), 53 insufficient resources, 57 operator intervention
#: (shutdown, starting up, a statement timeout), 25006 read-only transaction (a standby), 25P03/25P04
#: a session timeout (the server closes the connection), 58 system error, 40 transaction rollback (a
#: serialization failure or a deadlock: the same statement succeeds when tried again), 55P03 lock not
#: available (a lock timeout).
#: A SQLSTATE no rule names is a statement's own failure (OTHER), whatever the driver's exception
#: class: psycopg raises OperationalError for class 54 too (a program limit, e.g. an index row too
#: large), which waiting cannot help.
RULES: tuple[Rule, ...] = (
    Rule(("42P01",), r"no such table|relation \S+ does not exist", _SCHEMA),
    Rule(("3D000",), r'database "[^"]*" does not exist', Diagnosis(Fault.CONFIGURATION, DATABASE)),
    Rule(("28",), r"password authentication failed|authentication failed|role \"[^\"]*\" does not exist"
                  r"|no pg_hba\.conf entry|no password supplied|password is required|requires a password",
         Diagnosis(Fault.CONFIGURATION, CREDENTIALS)),
    Rule(("42501",), r"permission denied|readonly database|read-only file system",
         Diagnosis(Fault.CONFIGURATION, RIGHTS)),
    # reliable names no prepared statement of its own: one missing, or there twice, is a pooler's
    # transaction mode handing this session's statements to other server sessions.
    Rule(("26000", "42P05"), r'prepared statement "[^"]*" (does not exist|already exists)',
         Diagnosis(Fault.CONFIGURATION, POOLER)),
    Rule((), r"unsupported startup parameter", Diagnosis(Fault.CONFIGURATION, POOLER)),
    Rule((), r"unable to open database file|file is not a database", Diagnosis(Fault.CONFIGURATION, SQLITE_FILE)),
    Rule(("08", "53", "57", "58", "25006", "25P03", "25P04", "40", "55P03"),
         r"connection|could not connect|timeout|timed out|starting up|shutting down|in recovery mode"
         r"|not yet accepting|too many clients|remaining connection slots|server closed|terminating"
         r"|database is locked|resolve host|translate host name|read-only transaction|network|broken pipe",
         _OUTAGE),
)

_COMPILED = tuple((rule, re.compile(rule.pattern, re.IGNORECASE)) for rule in RULES)
#: Driver exception type names that mean the connection (not the statement) failed, when no rule matched.
_CONNECTION_TYPES = ("OperationalError", "InterfaceError", "DisconnectionError", "TimeoutError")


def classify(exc: BaseException) -> Diagnosis:
    """The diagnosis of store error `exc` (see the module doc and RULES)."""
    if isinstance(exc, StoreMisconfigured):
        return Diagnosis(Fault.CONFIGURATION, str(exc), schema=exc.schema)
    if isinstance(exc, StoreUnavailable):
        return _OUTAGE
    original = getattr(exc, "orig", None) or exc  # SQLAlchemy's DBAPIError wraps the driver's
    sqlstate = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
    if sqlstate:  # the server said what it was: its message (which may quote data) is not read
        for rule, _pattern in _COMPILED:
            if any(str(sqlstate).startswith(prefix) for prefix in rule.sqlstates):
                return rule.diagnosis
        return _OUTAGE if getattr(exc, "connection_invalidated", False) else Diagnosis(Fault.OTHER)
    else:
        text = str(original)
        for rule, pattern in _COMPILED:
            if pattern.search(text):
                return rule.diagnosis
    names = {type(exc).__name__, type(original).__name__}
    if names & set(_CONNECTION_TYPES) or getattr(exc, "connection_invalidated", False):
        return _OUTAGE
    return Diagnosis(Fault.OTHER)


def rolled_back(exc: BaseException) -> bool:
    """Whether the server rolled the statement back for its conflict with another transaction
    (40P01 a deadlock, 40001 a serialization failure), on `exc` or the error it was raised from: an
    outage for a single write's retry loop (RULES), but nothing wrong with the server. Not 40003
    (statement completion unknown): the statement may have committed, a lost reply."""
    for error in (exc, exc.__cause__):
        original = getattr(error, "orig", None) or error
        sqlstate = getattr(original, "sqlstate", None) or getattr(original, "pgcode", None)
        if sqlstate:
            return str(sqlstate) in ("40001", "40P01")
    return False
