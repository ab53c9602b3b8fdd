"""Parts of a tracked send made cheaper for issue 40 that must say exactly what they said before:
a message's dict (reliable.worker.registration._as_dict) and the store's statements as bytes."""

from __future__ import annotations

from typing import Any

import dramatiq

from reliable.store.sqlrunner import _positional, load_queries
from reliable.worker.registration import _as_dict


def test_a_messages_dict_is_its_asdict() -> None:
    message: dramatiq.Message[Any] = dramatiq.Message(queue_name="q", actor_name="a", args=(1,), kwargs={"k": 2},
                                                      options={"x": 1})
    assert _as_dict(message) == message.asdict()
    assert _as_dict(message)["options"] is message.options  # the same object, as asdict gives it


def test_a_delivered_messages_proxy_gives_its_messages_dict() -> None:
    """A delivery (Dramatiq's MessageProxy, fields forwarded per instance) re-sent by an app."""
    from dramatiq.broker import MessageProxy

    message: dramatiq.Message[Any] = dramatiq.Message(queue_name="q", actor_name="a", args=(), kwargs={}, options={})
    assert _as_dict(MessageProxy(message)) == message.asdict()


def test_a_subclass_with_its_own_asdict_is_asked() -> None:
    class Own(dramatiq.Message[Any]):
        def asdict(self) -> dict[str, Any]:
            return {"own": True}

    assert _as_dict(Own(queue_name="q", actor_name="a", args=(), kwargs={}, options={})) == {"own": True}


def test_the_statements_are_ascii_bytes_with_their_placeholders_numbered() -> None:
    for name, sql in load_queries("postgresql").items():
        query = _positional(sql)
        assert isinstance(query.sql, bytes), name  # no statement has a character outside ASCII
        assert b"%(" not in query.sql and all(f"${n}".encode() in query.sql for n in range(1, len(query.names) + 1))
    assert _positional("SELECT %(a)s, 'é'").sql == "SELECT $1, 'é'"  # not ASCII: kept as text
