"""Runbook pages: the runbook of an alert rendered on request, where its `runbook_url` points.

`reliable exporter` serves them at ``/runbooks/<lower-case alert name>`` (the default
`runbook_base_url` is ``http://127.0.0.1:9464/runbooks/``; with that default, the pages' links
follow the address the exporter is actually reached at), and so does the console at
``/alerts/<name>`` (as HTML). A store rule is evaluated at that moment: the page shows the current
alert of the rule (the first one whose labels match the query string, which every alert's
`runbook_url` carries, e.g. ``?queue=mail&actor=send``) with its affected jobs. A PromQL rule, or a store rule
that does not hold now, gets the runbook without job details, labelled from the query string.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence

from ..store import StoreCore
from ..store.alert_queries import collect_facts
from .engine import AlertEngine
from .evaluator import evaluate, requests_for
from .model import Candidate, build_labels
from .rules import AlertRule
from .runbooks import DEFAULT_RUNBOOK_BASE_URL, RunbookRenderer, runbook_url

__all__ = ["RunbookPages"]

class RunbookPages:
    """Renders the runbook of an alert by its lower-cased name, with the store's current facts.

    Parameters:
      store: the state store (read only).
      rules: the loaded rules (store and PromQL); each one with a runbook gets a page.
      renderer: the runbook renderer (its base URL and links are those of the alerts).
      clock: the evaluation time; defaults to the database's clock.
    """

    def __init__(self, store: StoreCore, rules: Sequence[AlertRule], renderer: RunbookRenderer, *,
                 clock: Callable[[], float] | None = None) -> None:
        self.store = store
        self.rules = {rule.name.lower(): rule for rule in rules if rule.runbook is not None}
        self.engine = AlertEngine(store, rules, renderer, clock=clock)

    def index(self, *, base_url: str | None = None) -> str:
        """The list of pages: one line per alert, with its kind (links under `base_url`, when given)."""
        base = base_url or self.engine.renderer.base_url
        lines = [f"{runbook_url(base, rule.name)}  {rule.name} ({rule.kind})" for _, rule in sorted(self.rules.items())]
        return "# Runbooks\n\n" + "\n".join(lines) + "\n"

    def base_for(self, served: str) -> str | None:
        """`served` (where the pages are being served) when the configured base is the default one,
        which names 127.0.0.1:9464 wherever the exporter runs; None: the configured base stands."""
        return served if self.engine.renderer.base_url == DEFAULT_RUNBOOK_BASE_URL else None

    def names(self) -> list[str]:
        """The alert names that have a runbook, sorted."""
        return sorted(rule.name for rule in self.rules.values())

    def render(self, slug: str, labels: Mapping[str, str], *, base_url: str | None = None) -> str | None:
        """The Markdown runbook of the alert named `slug` (lower case), or None when there is none.

        `base_url`: where the page is served (its links and footer name that address instead of the
        configured `runbook_base_url`)."""
        rule = self.rules.get(slug.lower())
        if rule is None:
            return None
        engine = self.engine
        if base_url is not None and base_url != engine.renderer.base_url:
            engine = copy.copy(engine)
            engine.renderer = engine.renderer.with_base_url(base_url)
        firing = self._firing(rule, labels)
        if firing is not None:
            return engine.runbook(firing) or ""
        # Not firing now (a PromQL rule, a resolved alert, labels that match nothing): the runbook
        # without job details. The query string is not used here: its values would land in the
        # page's copyable commands unchecked.
        quiet = Candidate(rule, build_labels(rule), 0.0)
        return engine.runbook(quiet, summary=f"{rule.name} is not firing here now: the runbook without "
                                                  "job details.") or ""

    def _firing(self, rule: AlertRule, labels: Mapping[str, str]) -> Candidate | None:
        """The store rule's alert that holds now and matches every given label, if any."""
        if rule.kind != "store":
            return None
        facts = collect_facts(self.store, requests_for(rule), self.engine.clock())
        for candidate in evaluate([rule], facts):
            if all(candidate.labels.get(key) == value for key, value in labels.items()):
                return candidate
        return None
