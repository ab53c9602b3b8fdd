"""`--app module[:broker]`: import an application so its actors register on its broker.

Used by `reliable policy explain` and `check` to see each actor's options as its code declares
them. Importing runs the module's top-level code, as `dramatiq module` does.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import dramatiq

from ..errors import ConfigError
from ..policy import Policy
from ..policy.ambiguity import DeclaredActor

__all__ = ["app_policy", "cwd_on_path", "declared_actors", "load_app"]


def cwd_on_path() -> None:
    """Put the current directory first on the import path, like `python -m`: a project names its own modules."""
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def load_app(spec: str) -> dramatiq.Broker:
    """Import the module of `spec` ("module" or "module:attribute") and return the broker its actors are on.

    Without an attribute: the one broker the module holds at top level, else Dramatiq's global broker
    if the import set one. Raises ConfigError saying what went wrong.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name:
        raise ConfigError(f"--app {spec!r}: expected 'module' or 'module:broker_attribute'")
    cwd_on_path()
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(f"--app {spec}: importing {module_name!r} failed: {type(exc).__name__}: {exc}") from None
    if attr:
        broker = getattr(module, attr, None)
        if not isinstance(broker, dramatiq.Broker):
            raise ConfigError(f"--app {spec}: {module_name}.{attr} is not a Dramatiq broker "
                              f"(got {type(broker).__name__})")
        return broker
    found: dict[int, tuple[str, dramatiq.Broker]] = {}
    for name, value in vars(module).items():
        if isinstance(value, dramatiq.Broker):
            found.setdefault(id(value), (name, value))
    if len(found) == 1:
        return next(iter(found.values()))[1]
    if len(found) > 1:
        names = ", ".join(sorted(name for name, _ in found.values()))
        raise ConfigError(f"--app {spec}: {module_name} holds several brokers ({names}); name one: "
                          f"--app {module_name}:NAME")
    broker = dramatiq.broker.global_broker
    if broker is None:
        raise ConfigError(f"--app {spec}: {module_name} declares no broker and set no global broker; "
                          f"name it: --app {module_name}:NAME")
    return broker


def declared_actors(broker: dramatiq.Broker) -> list[DeclaredActor]:
    """Every actor on `broker` with the queue and options its code declares, by name."""
    out = []
    for name in sorted(broker.actors):
        actor = broker.actors[name]
        fn: Any = getattr(actor.fn, "__wrapped__", actor.fn)
        where = f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', name)}"
        out.append(DeclaredActor(name, actor.queue_name, dict(actor.options), where))
    return out


def app_policy(broker: dramatiq.Broker) -> Policy | None:
    """The policy reliable was installed with on `broker`, or None if reliable is not installed on it."""
    from ..registrar import find_installed

    installed = find_installed(broker)
    return None if installed is None else installed.registration.policy
