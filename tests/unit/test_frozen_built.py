"""reliable.store.frozen: a frozen dataclass built from its fields' mapping is the one its __init__ makes."""

from __future__ import annotations

import dataclasses

import pytest

from reliable.states import Event, JobStatus, sources, target
from reliable.store.frozen import built, field_names
from reliable.store.writes import JobWrite, transition_write


@dataclasses.dataclass(frozen=True)
class Point:
    x: int
    y: int = 0


def test_built_equals_the_generated_init_and_stays_frozen() -> None:
    point = built(Point, {"x": 1, "y": 2}, field_names(Point))
    assert point == Point(1, 2) and hash(point) == hash(Point(1, 2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        point.x = 3  # type: ignore[misc]


def test_a_mapping_that_is_not_exactly_the_fields_goes_through_init() -> None:
    names = field_names(Point)
    assert built(Point, {"x": 1}, names) == Point(1)  # a default, as __init__ gives it
    with pytest.raises(TypeError):
        built(Point, {"x": 1, "z": 2}, names)
    with pytest.raises(TypeError):
        built(Point, {"y": 1}, names)


@pytest.mark.parametrize("event", list(Event))
def test_every_transition_write_is_the_one_init_builds(event: Event) -> None:
    try:
        target(event)
        sources(event)
    except (KeyError, ValueError):
        pytest.skip(f"{event.value} is no transition")
    kwargs = {"worker_id": "w", "attempt_id": "a", "lease_ttl": 30.0, "delay": 1.0, "delivery_digest": "d",
              "error": {"error_class": "E", "error_type": "t", "message": "m", "traceback": "tb"}}
    try:
        write = transition_write("job", event, **kwargs)  # type: ignore[arg-type]
    except (KeyError, ValueError):
        pytest.skip(f"{event.value} has no transition write")
    assert write == JobWrite(**dict(write.__dict__))
    assert set(write.__dict__) == field_names(JobWrite)
    assert write.to_status in {s.value for s in JobStatus}
