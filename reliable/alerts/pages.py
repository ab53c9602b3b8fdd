"""Runbook pages: the runbook of an alert rendered on request, where its `runbook_url` points.

`reliable exporter` serves them at ``/runbooks/<lower-case alert name>`` (the default
`runbook_base_url` is ``http://127.0.0.1:9464/runbooks/``; with that default, the pages' links
follow the address the exporter is actually reached at), and so does the console at
``/alerts/<name>`` (as HTML). A store rule is evaluated at that moment: the page shows the current
alert of the rule (the first one whose labels match the query string, which every alert's
`runbook_url` carries, e.g. ``?queue=mail&actor=send``) with its affected jobs. Otherwise (a PromQL
rule, or a store alert another evaluator raised) the page asks Alertmanager, when one is configured,
for the alert it holds under that name and labels, and lists the jobs its labels select (actor,
queue, owner, state: `PROMQL_JOB_STATES` unless it names a state). Only when neither the store nor
Alertmanager has it does the page say "not firing here" (and when Alertmanager does not answer, it
says so instead of claiming quiet): the runbook without job details.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..states import FAILURE_STATES, JobStatus
from ..store import StoreCore
from ..store.alert_facts import JobSample
from ..store.alert_queries import collect_facts
from .client import AlertmanagerClient, DeliveryError
from .engine import AlertEngine
from .evaluator import evaluate, requests_for
from .model import Candidate, build_labels
from .rules import AlertRule
from .runbooks import DEFAULT_RUNBOOK_BASE_URL, RunbookRenderer, runbook_url, safe_command

__all__ = ["PROMQL_JOB_STATES", "PageJob", "RunbookPage", "RunbookPages"]

#: The labels of an alert held by Alertmanager that name something (a queue, an actor, a team, a
#: host), and what such a name may hold: letters, digits and `_ . : @ / -`, at most 255 characters.
_NAMED_LABELS = ("queue", "actor", "owner", "instance", "job")
_NAME = re.compile(r"[\w.:@/-]{1,255}")
_STATES = frozenset(status.value for status in JobStatus)

#: The jobs a PromQL alert's runbook lists when its labels name no state: those its failures left
#: for someone to act on (FAILED, DEAD, REVIEW) or waiting to retry, most recently changed first.
PROMQL_JOB_STATES: tuple[str, ...] = tuple(sorted({*(s.value for s in FAILURE_STATES), JobStatus.RETRY_WAIT.value}))

@dataclass(frozen=True)
class PageJob:
    """One job a runbook page lists: its id, status and safe command (`runbooks.safe_command`), if any."""

    job_id: str
    status: str
    command: str | None
    cli: str | None


@dataclass(frozen=True)
class RunbookPage:
    """A rendered runbook (Markdown) and the jobs it lists, for a page to link and act on."""

    text: str
    jobs: tuple[PageJob, ...] = ()


class RunbookPages:
    """Renders the runbook of an alert by its lower-cased name, with the store's current facts.

    Parameters:
      store: the state store (read only).
      rules: the loaded rules (store and PromQL); each one with a runbook gets a page.
      renderer: the runbook renderer (its base URL and links are those of the alerts).
      clock: the evaluation time; defaults to the database's clock.
      alertmanager: reads the alerts Alertmanager holds (PromQL alerts, other evaluators'); None:
        only the store's alerts show their jobs.
    """

    def __init__(self, store: StoreCore, rules: Sequence[AlertRule], renderer: RunbookRenderer, *,
                 clock: Callable[[], float] | None = None, alertmanager: AlertmanagerClient | None = None) -> None:
        self.store = store
        self.rules = {rule.name.lower(): rule for rule in rules if rule.runbook is not None and rule.enabled}
        self.engine = AlertEngine(store, rules, renderer, clock=clock)
        self.alertmanager = alertmanager

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
        page = self.page(slug, labels, base_url=base_url)
        return None if page is None else page.text

    def page(self, slug: str, labels: Mapping[str, str], *, base_url: str | None = None) -> RunbookPage | None:
        """`render`, with the jobs the runbook lists (see the module doc for which alert it shows)."""
        rule = self.rules.get(slug.lower())
        if rule is None:
            return None
        engine = self.engine
        if base_url is not None and base_url != engine.renderer.base_url:
            engine = copy.copy(engine)
            engine.renderer = engine.renderer.with_base_url(base_url)
        firing = self._firing(rule, labels)
        summary: str | None = None
        if firing is None:
            try:
                firing = self._held(rule, labels)
            except DeliveryError as exc:
                summary = (f"Alertmanager did not answer ({exc}): whether {rule.name} fires is unknown here; the "
                           "runbook without job details.")
            else:
                if firing is not None:
                    summary = firing.context.get("summary")
        if firing is None:
            # Not firing now (a resolved alert, labels that match nothing, in the store and in
            # Alertmanager): the runbook without job details. The query string is not used here: its
            # values would land in the page's copyable commands unchecked.
            where = "here or in Alertmanager" if self.alertmanager is not None else "here"
            quiet = Candidate(rule, build_labels(rule), 0.0)
            text = engine.renderer.runbook(quiet, [], summary=summary or f"{rule.name} is not firing {where} now: "
                                                                         "the runbook without job details.")
            return RunbookPage(text or "")
        jobs = engine.jobs(firing)
        listed = []
        for ctx in jobs:
            safe = safe_command(ctx.job.status, ctx.job.job_id, rule.name)
            listed.append(PageJob(ctx.job.job_id, ctx.job.status, safe and safe[0], safe and safe[1]))
        return RunbookPage(engine.renderer.runbook(firing, jobs, summary=summary) or "", tuple(listed))

    def _held(self, rule: AlertRule, labels: Mapping[str, str]) -> Candidate | None:
        """The alert Alertmanager holds under the rule's name and `labels`, as a candidate whose jobs
        are those its labels select; None when it holds none (or none is configured)."""
        if self.alertmanager is None:
            return None
        found = self.alertmanager.alerts({**labels, "alertname": rule.name})
        if not found:
            return None
        alert: dict[str, Any] = found[0]
        held = {str(k): str(v) for k, v in alert["labels"].items()}
        # Alertmanager takes alerts from anyone who can reach it: its labels select jobs and land in
        # the page's copyable commands, so only names as reliable writes them and real states pass.
        if any(key in held and not _NAME.fullmatch(held[key]) for key in _NAMED_LABELS):
            return None
        state = held.get("state")
        if state is not None and state not in _STATES:
            return None
        sample = JobSample(queue=held.get("queue"), actor=held.get("actor"),
                           states=(state,) if state else PROMQL_JOB_STATES, owner=held.get("owner"))
        summary = (alert.get("annotations") or {}).get("summary")
        return Candidate(rule, held, 0.0, {"summary": summary, "source": "alertmanager"}, sample=sample)

    def _firing(self, rule: AlertRule, labels: Mapping[str, str]) -> Candidate | None:
        """The store rule's alert that holds now and matches every given label, if any."""
        if rule.kind != "store":
            return None
        facts = collect_facts(self.store, requests_for(rule), self.engine.clock())
        for candidate in evaluate([rule], facts):
            if all(candidate.labels.get(key) == value for key, value in labels.items()):
                return candidate
        return None
