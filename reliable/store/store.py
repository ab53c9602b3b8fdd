"""StateStore: every job transition as one compare-and-set write plus its event row.

What each write does is defined once (reliable/store/writes.py, derived from reliable/states.py)
and executed by one named query per dialect (reliable/store/sql/*.sql, run by SqlRunner). The
worker's claims and finishes, checkpoints, operator commands and recovery all go through it.

StateStore is assembled from one class per caller's concern, all sharing one StoreCore (engine,
named queries, clock, listeners: store/core.py):

  WorkerClaims (claims.py)          the worker's claims, looks and fast-path success
  WorkerProgress (progress.py)      heartbeat, checkpoints, effects of a running attempt
  WorkerCompletion (completion.py)  an attempt's outcome with what follows it; group barriers
  Registrations (registration.py)   new jobs, alone or inside another write's transaction
  OperatorTransitions (transitions.py)  operators' and recovery's compare-and-set, re-dispatch
  Sweeps (sweeps.py)                the jobs recovery looks for
  Reads (reads.py)                  jobs, events, attempts, effects, counts for console/CLI/alerts
  NamedQueries (named_queries.py)   the features' units of work

Code that needs one concern is typed with its class (a StateStore is each of them).
"""

from __future__ import annotations

from .claims import WorkerClaims
from .completion import WorkerCompletion
from .core import EventListener, StoreCore
from .json_text import checkpoint_json
from .named_queries import NamedQueries
from .progress import WorkerProgress
from .reads import Reads
from .registration import Registrations
from .sweeps import Sweeps
from .transitions import OperatorTransitions

__all__ = ["EventListener", "StateStore", "checkpoint_json"]


class StateStore(WorkerClaims, WorkerProgress, WorkerCompletion, OperatorTransitions, NamedQueries, Registrations,
                 Sweeps, Reads, StoreCore):
    """The durable job state: a projection per job plus its append-only event history.

    Every change of status is one write guarded by the transition table (the job is in a state the
    event is allowed from) and by the caller's fences (lease_id, version, lease expiry by the
    database's clock), plus one event row, in one transaction. A write that matches no row gives
    the caller a typed error (TransitionRefused, ClaimRefused, LeaseLost), never a silent overwrite.

    Parameters:
      url: a SQLAlchemy URL, e.g. ``sqlite:///reliable.db`` or
        ``postgresql+psycopg://postgres@127.0.0.1:5432/reliable``.
      engine: an engine to use instead of creating one from `url` (its pool is used as it is).
      host: recorded on operator events; defaults to this machine's host name.
      max_connections: the most connections this store opens (one pool per store object, so per
        process in a worker); threads beyond it wait up to `pool_timeout` seconds for a free one,
        then get StoreUnavailable. Default 10; see docs/operations.md for sizing it against
        PostgreSQL's max_connections.
      listeners: callables given every event row after its commit (see add_listener).
      clock: for tests, returns the time (epoch seconds) the store uses instead of the database's
        clock; None from it falls back to the database's.
      group_commit: PostgreSQL: the single writes of all this process's threads (claims, successes,
        checkpoints...) are sent together, one statement and one commit per batch, each write keeping
        its own guard and outcome (reliable/store/batching.py). Ignored on SQLite.
    """
