"""The director: starts the workers, enqueues the story, plays the operator and reports from the store.

Every state shown comes from the store, written by the real middleware; the director only does
what a person would: pause and resume through `reliable.control.Control` (audited as operator
"demo"), crash a worker, read an alert's runbook, fix the partner's endpoint and requeue the
dead job. It ends by checking every job's final record against the story.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field

from reliable.control import Control
from reliable.errors import ReliableError
from reliable.events import LOGGER_NAME
from reliable.operators import Operator
from reliable.policy import Policy
from reliable.redact import redact_url
from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.records import Job

from ..store.provision import ensure_database
from .actors import EXPORT_PAGES, INDEX_PAGES, World
from .alerting import evaluate_alerts
from .config import DemoSettings
from .narrate import page_of, sentence
from .report import report
from .story import ACTS, EXPECTED, differences
from .view import JobRow, LiveView, PlainView
from .workers import Workers, make_workers

__all__ = ["Director"]

PAUSE_AT_PAGE = 3
CRASH_AT_PAGE = 3
PAGES = {"export_report": EXPORT_PAGES, "rebuild_index": INDEX_PAGES}
#: Seconds (before the speed factor) between acts, and that a person takes to act on a paused job or an alert.
ACT_GAP = 2.0
PAUSE_HOLD = 2.5


@dataclass
class _Beats:
    """What the operator already did."""

    paused: bool = False
    paused_seen_at: float | None = None
    resumed: bool = False
    crashed: bool = False
    alerted: float = 0.0
    requeued: bool = False
    alerts: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


class Director:
    """Plays the story once: `run()` returns the exit status (0: every job ended as the story says)."""

    def __init__(self, settings: DemoSettings, view: PlainView | LiveView) -> None:
        self.settings = settings
        self.view = view
        self.beats = _Beats()
        self.started = time.monotonic()
        self._seen: dict[str, int] = {}

    def elapsed(self) -> float:
        """Seconds since the story began."""
        return time.monotonic() - self.started

    def say(self, subject: str, text: str) -> None:
        """Add a line to the log."""
        self.view.log(self.elapsed(), subject, text)

    def run(self) -> int:
        """Play the story, print the summary; 0 if the store's final record matches the story."""
        s = self.settings
        s.write_files()
        handler = _log_to_file(s)
        created = ensure_database(s.store_url)
        store = StateStore(s.store_url)
        try:
            store.upgrade()
            policy = Policy.load(s.policy_path)
            workers = make_workers(s, policy)
            self.view.start(self._header())
            if created:
                self.say("demo", created)
            try:
                job_ids = self._play(store, policy, workers)
            finally:
                workers.stop()
                self.view.stop()
            problems = [*self.beats.problems, *differences(store, job_ids)]
            return report(self.view.console, store, s, job_ids, workers.label, problems)
        finally:
            store.close()
            logging.getLogger().removeHandler(handler)
            logging.getLogger(LOGGER_NAME).removeHandler(handler)
            handler.close()

    def _budget(self) -> float:
        return self.settings.seconds(75.0) + (45.0 if self.settings.real else 15.0)

    def _header(self) -> str:
        s = self.settings
        where = (f"RabbitMQ {redact_url(s.broker_url or '')}, 3 real `dramatiq` worker processes" if s.real
                 else "Dramatiq's in-process StubBroker, 2 Workers (threads), no services needed")
        return f"reliable demo: store {redact_url(s.store_url)}; {where}; logs in {s.workdir}"

    def _play(self, store: StateStore, policy: Policy, workers: Workers) -> dict[str, str]:
        control = Control(store, policy=policy, broker=workers.producer,
                          identity=Operator("demo", socket.gethostname(), "demo"))
        workers.start()
        job_ids: dict[str, str] = {}
        act, act_ended_at = -1, 0.0
        deadline = time.monotonic() + self._budget()
        while True:
            if act + 1 < len(ACTS) and time.monotonic() - act_ended_at >= self.settings.seconds(ACT_GAP):
                act += 1
                job_ids.update(self._begin(ACTS[act].title, ACTS[act].actors, workers))
                act_ended_at = float("inf")
            jobs = {actor: store.get(job_id) for actor, job_id in job_ids.items()}
            self._narrate(store, jobs, workers)
            self._act(store, control, workers, jobs)
            self._table(jobs, workers)
            if act_ended_at == float("inf") and self._ended(ACTS[act].actors, jobs):
                if act + 1 == len(ACTS):
                    self._epilogue(store, job_ids, workers)
                    return job_ids
                act_ended_at = time.monotonic()
            if time.monotonic() > deadline:
                self.beats.problems.append(f"the story did not finish within {self._budget():.0f}s")
                return job_ids
            dead = workers.failures()
            if dead:
                self.beats.problems += [f"worker process: {d} (see its log in {self.settings.workdir})" for d in dead]
                return job_ids
            time.sleep(0.15)

    def _begin(self, title: str, actors: tuple[str, ...], workers: Workers) -> dict[str, str]:
        self.say("demo", title)
        if "rebuild_index" in actors:
            self.say("demo", f"crash scenario: {workers.crash_note}")
        ids = workers.enqueue(actors)
        self.say("demo", f"{len(ids)} job(s) registered in the store (PENDING) in one transaction, then published")
        return ids

    def _epilogue(self, store: StateStore, job_ids: dict[str, str], workers: Workers) -> None:
        note = workers.after_story()
        if note is None:
            return
        self.say("rebuild_index", note)
        until = time.monotonic() + 5.0
        while time.monotonic() < until:
            # Look first, narrate second: the refusal seen here is then always told before returning.
            refused = any(e.event == "stale_commit_rejected" for e in store.events(job_ids["rebuild_index"]))
            jobs = {actor: store.get(job_id) for actor, job_id in job_ids.items()}
            self._narrate(store, jobs, workers)
            if refused:
                return
            time.sleep(0.15)
        self.beats.problems.append("rebuild_index: the hung worker's stale write was not seen refused")

    def _narrate(self, store: StateStore, jobs: dict[str, Job], workers: Workers) -> None:
        for actor, job in jobs.items():
            events = store.events(job.job_id)
            for event in events[self._seen.get(actor, 0):]:
                line = sentence(event, workers.label)
                if line is not None:
                    self.say(actor, line)
            self._seen[actor] = len(events)

    def _table(self, jobs: dict[str, Job], workers: Workers) -> None:
        steps = {e.actor: e.step for e in EXPECTED}
        rows = [JobRow(actor, job.job_id, job.status.value, job.attempt,
                       f"page {page_of(job.checkpoint)}/{PAGES[actor]}" if actor in PAGES else "-",
                       workers.label(job.worker_id) if job.status is JobStatus.RUNNING else "-", steps[actor])
                for actor, job in jobs.items()]
        self.view.jobs(rows)

    def _ended(self, actors: tuple[str, ...], jobs: dict[str, Job]) -> bool:
        """Whether every job of an act is in its final state and the operator has done their part."""
        b = self.beats
        final = {e.actor: e.final for e in EXPECTED}
        beats = {"export_report": b.resumed, "rebuild_index": b.crashed, "send_webhook": b.requeued}
        return all(jobs[a].status is final[a] and beats.get(a, True) for a in actors)

    # -- the operator's part --------------------------------------------------------------------

    def _act(self, store: StateStore, control: Control, workers: Workers, jobs: dict[str, Job]) -> None:
        b = self.beats
        export, index, hook = jobs.get("export_report"), jobs.get("rebuild_index"), jobs.get("send_webhook")
        now = time.monotonic()
        if export is not None and not b.paused and export.status is JobStatus.RUNNING \
                and page_of(export.checkpoint) >= PAUSE_AT_PAGE:
            b.paused = self._command(control, "pause", export, "demo: show that a long export pauses and resumes")
        if export is not None and b.paused and not b.resumed and export.status is JobStatus.PAUSED:
            b.paused_seen_at = b.paused_seen_at or now
            if now - b.paused_seen_at >= self.settings.seconds(PAUSE_HOLD):
                b.resumed = self._command(control, "resume", export, "demo: the export may go on")
        if index is not None and not b.crashed and index.status is JobStatus.RUNNING \
                and page_of(index.checkpoint) >= CRASH_AT_PAGE and workers.label(index.worker_id) == "worker-2":
            b.crashed = True
            self.say("rebuild_index", workers.crash())
        if hook is not None and not b.alerted and hook.status is JobStatus.DEAD:
            b.alerted = now
            self._alert(store)
        if hook is not None and b.alerted and not b.requeued and now - b.alerted >= self.settings.seconds(PAUSE_HOLD):
            World(self.settings.state_dir).fix_webhook()
            self.say("send_webhook", "the partner fixed their endpoint; on-call follows the runbook's safe action")
            b.requeued = self._command(control, "requeue", hook, "endpoint fixed (alert ReliableDeadLetterGrowth)")

    def _command(self, control: Control, command: str, job: Job, reason: str) -> bool:
        cli = "reliable dlq requeue" if command == "requeue" else f"reliable {command}"
        try:
            result = getattr(control, command)(job.job_id, reason=reason)
        except ReliableError as exc:
            self.beats.problems.append(f"{job.actor}: {command} refused: {exc}")
            self.say(job.actor, f"operator demo: `{cli} {job.job_id[:8]}...` REFUSED: {exc}")
            return True  # the story goes on; the refusal is reported at the end
        self.say(job.actor, f"operator demo runs `{cli} {job.job_id[:8]}... --reason {reason!r}`: {result.message}")
        return True

    def _alert(self, store: StateStore) -> None:
        try:
            round_ = evaluate_alerts(store, self.settings)
        except ReliableError as exc:
            self.beats.problems.append(f"alerts: evaluation failed: {exc}")
            self.say("alerts", f"evaluation failed: {exc}")
            return
        if not round_.firing:
            self.beats.problems.append("alerts: no alert fired for the dead-lettered job")
        for alert in sorted(round_.firing, key=lambda a: a.alertname):
            labels, summary = alert.labels, alert.annotations.get("summary")
            self.say("alerts", f"FIRING {alert.alertname} (severity {labels.get('severity')}, route "
                               f"{labels.get('route')}, owner {labels.get('owner')}): {summary}")
            self.beats.alerts.append(alert.alertname)
        dead = next((a for a in round_.firing if a.alertname == "ReliableDeadLetterGrowth"), None)
        if dead is not None:
            runbook = round_.rendered.get(dead.alertname, "")
            if not runbook.strip():
                self.beats.problems.append("alerts: the ReliableDeadLetterGrowth runbook rendered empty")
            self.view.block(f"runbook of {dead.alertname}, rendered in the sandbox from {round_.runbooks}", runbook)
        if self.settings.alertmanager:
            outcome = f"sent {round_.sent}" if not round_.errors else f"NOT delivered: {round_.errors}"
            self.say("alerts", f"Alertmanager {self.settings.alertmanager}: {outcome}")
            if round_.errors:
                self.beats.problems.append(f"alerts: delivery failed: {round_.errors}")
        else:
            self.say("alerts", "not sent anywhere (pass --alertmanager URL to deliver to Alertmanager API v2)")


def _log_to_file(settings: DemoSettings) -> logging.Handler:
    """Send reliable's and Dramatiq's log records (JSON event lines included) to demo.log, not the screen."""
    handler = logging.FileHandler(settings.workdir / "demo.log", encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    # install(json_logs=True) leaves an event logger that has a handler alone; without this one
    # it would write the events to stderr, over the story on the screen.
    events = logging.getLogger(LOGGER_NAME)
    events.addHandler(handler)
    events.propagate = False
    return handler
