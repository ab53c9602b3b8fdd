"""A process that used the store, then forked (a pre-forking web server whose master sent a job):
the child's store opens its own connections, never the parent's pooled ones (whose sockets it
shares), and the parent's keep working."""

from __future__ import annotations

import os
import signal

from sqlalchemy import text

from reliable.store import StateStore


def _backend(store: StateStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_forked_child_opens_its_own_connections(pg_store: StateStore) -> None:
    parent = _backend(pg_store)  # one idle connection left in the pool
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answers through the pipe, never returns into pytest
        try:
            signal.alarm(20)
            os.write(writer, str(_backend(pg_store)).encode())
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    child = int(os.read(reader, 32))
    assert child != parent
    assert _backend(pg_store) == parent  # the parent's connection is intact, still its own
