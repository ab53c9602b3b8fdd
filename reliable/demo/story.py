"""What each job of the story must end as, checked against the store after the run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from reliable.states import JobStatus
from reliable.store import StateStore
from reliable.store.records import Effect, Job, JobEvent

from .actors import EXPORT_PAGES, INDEX_PAGES

__all__ = ["ACTS", "EXPECTED", "Act", "Expectation", "differences"]

Check = Callable[[Job, Sequence[JobEvent], Sequence[Effect]], list[str]]
OPERATOR = "demo"


def _has(events: Sequence[JobEvent], name: str, **detail: object) -> JobEvent | None:
    for event in events:
        if event.event == name and all((event.detail or {}).get(k) == v for k, v in detail.items()):
            return event
    return None


def _need(events: Sequence[JobEvent], name: str, what: str, **detail: object) -> list[str]:
    return [] if _has(events, name, **detail) else [f"no {name} event ({what})"]


def _by_operator(events: Sequence[JobEvent], name: str) -> list[str]:
    event = _has(events, name)
    if event is None:
        return [f"no {name} event"]
    if event.operator != OPERATOR or not event.reason:
        return [f"{name} not audited with operator {OPERATOR!r} and a reason "
                f"(got {event.operator!r}, {event.reason!r})"]
    return []


def _resumed(events: Sequence[JobEvent]) -> list[str]:
    if any(e.event == "claim" and (e.attempt or 0) >= 2 and e.checkpoint for e in events):
        return []
    return ["no later attempt started from a checkpoint"]


def _pages(effects: Sequence[Effect], pages: int) -> list[str]:
    problems = []
    if len(effects) != pages:
        problems.append(f"{len(effects)} pages recorded, expected {pages}")
    twice = [e.op_key for e in effects if e.duplicates]
    if twice:
        problems.append(f"pages written twice: {', '.join(twice)}")
    return problems


def _transient(job: Job, events: Sequence[JobEvent], effects: Sequence[Effect]) -> list[str]:
    return _need(events, "retry_scheduled", "a transient failure retried", error_class="transient")


def _rate_limited(job: Job, events: Sequence[JobEvent], effects: Sequence[Effect]) -> list[str]:
    retry = _has(events, "retry_scheduled", rate_limited=True)
    if retry is None:
        return ["no rate-limited retry"]
    delay = float(retry.detail.get("delay") or 0.0)
    later = [e for e in events if e.event == "claim" and e.at > retry.at]
    if delay < 1.0:
        return [f"Retry-After not used as the delay (delay {delay}s)"]
    if not later or later[0].at - retry.at < delay - 0.05:
        return [f"the next attempt did not wait the Retry-After of {delay:g}s"]
    return []


def _invalid(job: Job, events: Sequence[JobEvent], effects: Sequence[Effect]) -> list[str]:
    return [] if job.last_error_class == "invalid_input" else [f"last error class {job.last_error_class}"]


def _review(job: Job, events: Sequence[JobEvent], effects: Sequence[Effect]) -> list[str]:
    return [] if job.last_error_class == "side_effect_unknown" else [f"last error class {job.last_error_class}"]


def _paused(job: Job, events: Sequence[JobEvent], effects: Sequence[Effect]) -> list[str]:
    return (_by_operator(events, "pause_requested") + _need(events, "pause_observed", "pause seen by the worker")
            + _by_operator(events, "resume") + _resumed(events) + _pages(effects, EXPORT_PAGES))


def _crashed(job: Job, events: Sequence[JobEvent], effects: Sequence[Effect]) -> list[str]:
    return (_need(events, "lease_expired", "the crashed worker's lease expired") + _resumed(events)
            + _pages(effects, INDEX_PAGES))


def _requeued(job: Job, events: Sequence[JobEvent], effects: Sequence[Effect]) -> list[str]:
    return _need(events, "dead_letter", "DEAD after its retries") + _by_operator(events, "requeue")


@dataclass(frozen=True)
class Expectation:
    """One job of the story: the step it shows, the state it must end in, its attempts, a check of its history."""

    actor: str
    step: str
    final: JobStatus
    attempts: int
    check: Check


EXPECTED: tuple[Expectation, ...] = (
    Expectation("sync_inventory", "a transient failure retried with backoff", JobStatus.SUCCEEDED, 2, _transient),
    Expectation("call_partner_api", "a 429 with Retry-After honoured", JobStatus.SUCCEEDED, 2, _rate_limited),
    Expectation("import_contacts", "invalid input fails fast", JobStatus.FAILED, 1, _invalid),
    Expectation("charge_card", "an ambiguous payment goes to REVIEW", JobStatus.REVIEW, 1, _review),
    Expectation("export_report", "a long export paused and resumed", JobStatus.SUCCEEDED, 2, _paused),
    Expectation("rebuild_index", "a worker crash, the job recovered", JobStatus.SUCCEEDED, 2, _crashed),
    Expectation("send_webhook", "DEAD after retries, then requeued", JobStatus.SUCCEEDED, 4, _requeued),
)


@dataclass(frozen=True)
class Act:
    """A part of the story: its jobs are enqueued together once the previous act has ended."""

    title: str
    actors: tuple[str, ...]


ACTS: tuple[Act, ...] = (
    Act("Act 1: each failure becomes what the policy says", ("sync_inventory", "call_partner_api",
                                                             "import_contacts", "charge_card")),
    Act("Act 2: long jobs checkpoint; an operator pauses one, a worker crashes under the other",
        ("export_report", "rebuild_index")),
    Act("Act 3: a job goes DEAD, an alert fires with its runbook, the job is requeued", ("send_webhook",)),
)


def differences(store: StateStore, job_ids: dict[str, str]) -> list[str]:
    """Every way the store's final record differs from the story (empty: the story held)."""
    problems: list[str] = []
    for expected in EXPECTED:
        job_id = job_ids.get(expected.actor)
        job = store.find(job_id) if job_id else None
        if job is None:
            problems.append(f"{expected.actor}: no job in the store")
            continue
        found: list[str] = []
        if job.status is not expected.final:
            found.append(f"ended {job.status.value}, expected {expected.final.value}")
        if job.attempt != expected.attempts:
            found.append(f"{job.attempt} attempts, expected {expected.attempts}")
        found += expected.check(job, store.events(job.job_id), store.effects(job.job_id))
        problems += [f"{expected.actor} ({job.job_id}): {p}" for p in found]
    return problems
