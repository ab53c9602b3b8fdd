"""Every private part of a third-party library reliable uses, in one place, each behind a version gate.

One module per library. Each names the releases (major.minor) whose private part was read and
found as used (`VERIFIED_*`, the tags read listed beside it), checks the installed release once
when imported, and has a fallback that uses public API only, slower or less exact, said in its
docstring. tests/unit/test_import_graph.py allows a third-party private name nowhere else in
reliable, and tests/unit/test_compat.py runs every fallback.

- `dramatiq_internals`: a delivery's decoded message (`MessageProxy._message`, read on every claim),
  a refused delivery pointed back at its queue, the worker's threads (`Worker.workers`);
- `pika_internals`: Dramatiq's RabbitMQ consumer (`_RabbitmqConsumer`), a delivery's tag (`_tag`),
  several acknowledgements queued then flushed once (`BlockingChannel._impl`, `_flush_output`);
- `prometheus_internals`: whether prometheus_client's values are multiprocess (`_multiprocess`);
- `rich_internals`: a table column's cells made plain text (`Column._cells`);
- `sqlalchemy_internals`: every pooled connection recycled after a disconnect (`Pool._invalidate`).
"""

from __future__ import annotations

__all__ = ["release"]


def release(version: str) -> str:
    """The major.minor of a version string (`VERIFIED_*` sets hold those): "2.2.1" -> "2.2"."""
    return ".".join(version.split(".")[:2])
