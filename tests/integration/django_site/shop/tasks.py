"""The app's actors, discovered by django_dramatiq (`manage.py rundramatiq` imports every tasks.py)."""

import dramatiq


@dramatiq.actor
def add(a: int, b: int) -> int:
    return a + b


@dramatiq.actor
def reject(value: str) -> None:
    raise ValueError(f"bad value {value!r}")  # invalid_input in the built-in policy: fails, no retry
