"""What workflows, schedules and the CLI need of reliable installed on a broker, named below the worker.

They make jobs through the middleware's `Registration` (reliable.worker.registration: the one way
a message becomes a job), yet sit below the worker in the layers (docs/architecture.md). So they
name here, as protocols, the little they use of it, and `find_installed` recognises the middleware
on a broker by what it has, not by its class: no feature imports the worker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, cast, runtime_checkable

from .errors import ConfigError

if TYPE_CHECKING:
    import dramatiq

    from .policy import Policy
    from .store import NewJob, StateStore

__all__ = ["Registering", "Registrar", "find_installed"]


@runtime_checkable
class Registering(Protocol):
    """The part of `reliable.worker.registration.Registration` the features use."""

    @property
    def policy(self) -> Policy:
        """The policy contracts are computed with."""

    def tracked_actor(self, broker: dramatiq.Broker, actor_name: str, *, who: str,
                      error: type[ConfigError] = ConfigError) -> Any:
        """The actor `who` names: `error` when it is not declared or not tracked."""

    def rate_limited_rule(self, broker: dramatiq.Broker, message: Any, exception: BaseException) -> str | None:
        """The rule that classifies `exception` as rate limited for this tracked message, else None."""

    def new_job(self, broker: dramatiq.Broker, message: dramatiq.Message[Any],
                delay: int | None) -> tuple[NewJob, tuple[str, ...]] | None:
        """The job to register for `message` and the names of the options it may not set (removed)."""


class Registrar(Protocol):
    """reliable installed on a broker, as workflows, schedules and the CLI see it."""

    @property
    def store(self) -> StateStore:
        """This process's store."""

    @property
    def registration(self) -> Registering:
        """How a message becomes a job."""


def find_installed(broker: dramatiq.Broker) -> Registrar | None:
    """reliable's middleware installed on `broker` (the one whose `registration` is a `Registering`), or None."""
    for middleware in broker.middleware:
        if isinstance(getattr(middleware, "registration", None), Registering):
            return cast("Registrar", middleware)
    return None
