"""A policy's `actors:` and `queues:` sections must name what the app declares: `undeclared_names`.

A section is looked up by the actor's or queue's exact name, so a typo (`export_order` for the actor
`export_orders`) does not fail: the real actor quietly gets the defaults (resume off, other retries).
The one rule, used by `reliable policy check --app` (an error, exit 2) and by a worker's boot (a
WARNING per name, or a refused boot with `strict_names=True`): every section name must be a declared
actor, or a declared queue (an actor's queue, a queue the broker declares, a retry lane of the
policy), and the closest declared name is offered (difflib). Pure.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

from .engine import Policy

__all__ = ["UndeclaredName", "undeclared_names"]


@dataclass(frozen=True)
class UndeclaredName:
    """A section of the policy naming no actor (kind "actors") or queue (kind "queues") of the app."""

    kind: str
    name: str
    #: Where the section is: "path:line" (or the path, or the kind when unknown).
    where: str
    #: The declared name closest to it, if any is close.
    closest: str | None

    @property
    def path(self) -> str:
        """The file of `where`."""
        path, _, line = self.where.rpartition(":")
        return path if path and line.isdigit() else self.where

    @property
    def line(self) -> int | None:
        """The line of `where`, if known."""
        _, _, line = self.where.rpartition(":")
        return int(line) if line.isdigit() else None

    @property
    def message(self) -> str:
        """What is wrong and the fix, without the place."""
        what = self.kind[:-1]
        hint = f"did you mean {self.closest!r}? " if self.closest else ""
        return (f"the app declares no {what} {self.name!r}: {hint}this section applies to nothing "
                f"(fix the name, or remove the section)")

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}.{self.name}: {self.message}"


def undeclared_names(policy: Policy, actors: Iterable[str], queues: Iterable[str]) -> list[UndeclaredName]:
    """Each `actors:` / `queues:` section of `policy` naming none of `actors` / `queues` (plus the
    policy's own retry lanes), sorted by kind and name."""
    spec = policy.spec
    found: list[UndeclaredName] = []
    for kind, sections, known in (("actors", spec.actors, set(actors)),
                                  ("queues", spec.queues, set(queues) | set(policy.lanes))):
        for name in sorted(set(sections) - known):
            close = difflib.get_close_matches(name, sorted(known), n=1)
            found.append(UndeclaredName(kind, name, spec.origins.get(f"{kind}.{name}", kind),
                                        close[0] if close else None))
    return found
