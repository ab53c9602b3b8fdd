"""The alert loop: query facts, evaluate, keep state in the store, deliver to Alertmanager.

It runs in its own process (`reliable alerts run`) or thread and only reads the job tables, so it
never blocks workers. The clock is injected (default: the database's clock, which also stamps
the jobs), as is the Alertmanager client.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from ..store import StoreCore
from ..store.alert_queries import JobContext, collect_facts, job_contexts, sample_job_ids
from .client import AlertmanagerClient
from .evaluator import evaluate, requests_for
from .lifecycle import FIRING, AlertState, DeliveryPolicy, advance, after_send, due, payload
from .model import Candidate
from .persist import load_alerts, save_alerts
from .rules import AlertRule
from .runbooks import RunbookRenderer

__all__ = ["AlertEngine", "DeliveryReport", "Evaluation"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evaluation:
    """What one evaluation found: the candidates and the resulting alert states."""

    now: float
    candidates: list[Candidate]
    states: dict[str, AlertState]
    deleted: set[str]
    seconds: float

    @property
    def firing(self) -> list[AlertState]:
        """Alerts firing after this evaluation."""
        return [s for s in self.states.values() if s.state == FIRING]


@dataclass(frozen=True)
class DeliveryReport:
    """What one delivery round did."""

    sent: int = 0
    failed: int = 0
    errors: dict[str, str] = field(default_factory=dict)


class AlertEngine:
    """Evaluates store rules and delivers alerts; see `run_once` and `run`.

    Parameters:
      store: the state store (reliable_alerts must exist: `reliable db upgrade`).
      rules: the loaded rules (PromQL and disabled rules are ignored here).
      renderer: renders annotations and runbooks.
      client: the Alertmanager client, or None to evaluate without sending.
      clock: returns the current epoch time; defaults to the database's clock.
      runbook_annotation: also send the rendered runbook as the `runbook` annotation (default off:
        Alertmanager and its receivers get the short annotations and the runbook_url).
    """

    def __init__(self, store: StoreCore, rules: Sequence[AlertRule], renderer: RunbookRenderer, *,
                 client: AlertmanagerClient | None = None, clock: Callable[[], float] | None = None,
                 policy: DeliveryPolicy | None = None, generator_url: str | None = None,
                 runbook_annotation: bool = False) -> None:
        self.store = store
        self.rules = [r for r in rules if r.kind == "store" and r.enabled]
        self.renderer = renderer
        self.client = client
        self.clock = clock or store.now
        self.policy = policy or DeliveryPolicy()
        self.generator_url = generator_url
        self.runbook_annotation = runbook_annotation

    def jobs(self, candidate: Candidate) -> list[JobContext]:
        """The affected jobs of an alert (named by the facts, else a few sampled), with their attempts."""
        ids = [j.job_id for j in candidate.jobs]
        if not ids and candidate.sample is not None:
            ids = sample_job_ids(self.store, candidate.sample)
        return job_contexts(self.store, ids)

    def annotations(self, candidate: Candidate) -> dict[str, str]:
        """The annotations sent with an alert (plus `runbook` when runbook_annotation is set)."""
        jobs = self.jobs(candidate)
        out = self.renderer.annotations(candidate, jobs)
        if self.runbook_annotation:
            runbook = self.renderer.runbook(candidate, jobs, summary=out["summary"])  # rendered just above
            if runbook is not None:
                out["runbook"] = runbook
        return out

    def runbook(self, candidate: Candidate, *, summary: str | None = None) -> str | None:
        """The rendered runbook of an alert with its affected jobs (None when the rule names none)."""
        return self.renderer.runbook(candidate, self.jobs(candidate), summary=summary)

    def evaluate(self, *, persist: bool = True) -> Evaluation:
        """Evaluate every store rule once; with `persist`, advance and save the alert states."""
        started = time.perf_counter()
        self.store.check_schema()
        now = self.clock()
        requests = [req for rule in self.rules for req in requests_for(rule)]
        facts = collect_facts(self.store, requests, now)
        candidates = evaluate(self.rules, facts)
        previous = load_alerts(self.store)
        states, deleted = advance(previous, candidates, now, self.policy)
        for candidate in candidates:
            state = states[candidate.fingerprint]
            if state.state == FIRING and (due(state, now) or not state.annotations):
                states[candidate.fingerprint] = replace(state, annotations=self.annotations(candidate))
        if persist:
            save_alerts(self.store, states.values(), deleted)
        return Evaluation(now, candidates, states, deleted, time.perf_counter() - started)

    def deliver(self) -> DeliveryReport:
        """Send every alert that is due (firing re-sends, resolutions, retries) and record the outcome."""
        if self.client is None:
            return DeliveryReport()
        now = self.clock()
        pending = [s for s in load_alerts(self.store).values() if due(s, now)]
        if not pending:
            return DeliveryReport()
        body = [payload(s, now, self.policy, self.generator_url) for s in pending]
        errors = self.client.send(body)
        # Counted as delivered only when every Alertmanager took it; re-sending is harmless (dedup by labels).
        error = "; ".join(errors.values()) if errors else None
        if error:
            logger.warning("alert delivery failed (%d alerts kept for retry): %s", len(pending), error)
        save_alerts(self.store, [after_send(s, now, self.policy, error) for s in pending])
        return DeliveryReport(sent=0 if error else len(pending), failed=len(pending) if error else 0, errors=errors)

    def run_once(self) -> tuple[Evaluation, DeliveryReport]:
        """One cycle: evaluate, then deliver."""
        evaluation = self.evaluate()
        return evaluation, self.deliver()

    def run(self, interval: float, stop: threading.Event, on_cycle: Callable[[Evaluation, DeliveryReport], None]
            | None = None) -> None:
        """Cycle every `interval` seconds until `stop` is set; a failing cycle is logged and retried."""
        while not stop.is_set():
            try:
                evaluation, report = self.run_once()
                if on_cycle is not None:
                    on_cycle(evaluation, report)
            except Exception:
                logger.exception("alert cycle failed; retrying in %.0fs", interval)
            stop.wait(interval)
