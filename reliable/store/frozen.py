"""Frozen dataclasses of the hot path built without their generated `__init__`.

A frozen dataclass's `__init__` sets each field through `object.__setattr__` (its own `__setattr__`
refuses): about 6 µs for JobWrite's 44 fields, 4 µs for a Job, several times per job. `built` puts
a complete mapping of the fields into the instance's `__dict__` at once: the same instance
(fields, equality, hash, the frozen guard on later assignment), for a tenth of the cost. Pure.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

__all__ = ["built", "field_names"]

T = TypeVar("T")


def field_names(cls: type[Any]) -> frozenset[str]:
    """The names of the fields of dataclass `cls`."""
    return frozenset(f.name for f in dataclasses.fields(cls))


def built(cls: type[T], values: dict[str, Any], names: frozenset[str]) -> T:
    """An instance of dataclass `cls` (no `__post_init__`) whose fields are `values`; `names`: its
    field names (`field_names`). `values` must name every field and nothing else, as the generated
    `__init__` would require with no default used: a mapping that does not goes through `cls(**values)`
    (which raises as before)."""
    if len(values) != len(names) or not names.issuperset(values):
        return cls(**values)
    made: T = object.__new__(cls)
    made.__dict__.update(values)
    return made
