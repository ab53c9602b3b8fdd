"""The vocabulary of operator commands: their names' rules, what one command did, and the part of
`Control` that other command surfaces (workflows, bulk operations) drive.

It sits below `reliable.control` so that workflows and bulk operations can speak of commands
without importing the control plane (which itself advances workflows): `Control` implements
`JobCommands`, and `reliable.control` re-exports every name here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .inputs import check_reason, check_reason_chars
from .operators import COMMANDS, Operator, OperatorsPolicy
from .states import TRANSITIONS, Event, JobStatus
from .store import Job

__all__ = [
    "COMMAND_EVENTS",
    "LIMIT_COMMANDS",
    "NEEDS_REASON",
    "PROCESS_COMMANDS",
    "QUEUE_COMMANDS",
    "RESOLUTIONS",
    "SCHEDULE_COMMANDS",
    "CommandResult",
    "JobCommands",
    "check_reason_text",
    "command_states",
    "require_reason",
]

#: How a REVIEW job is resolved (`reconcile`): its side effect happened, or it did not.
RESOLUTIONS: tuple[str, ...] = ("succeeded", "cancelled")

#: The commands that need a reason: every operator command, on one job or many, dry run or not. Each
#: changes a job (or takes it out of the dead letters) and the job's history must say why.
#: The schedule commands (reliable.schedules), each with the job command an operators policy must
#: allow on the schedule's queue and owner: pausing or resuming a schedule is pausing or resuming
#: its jobs to come, triggering one runs its job again, deleting one discards its jobs to come.
SCHEDULE_COMMANDS: Mapping[str, str] = {"schedules pause": "pause", "schedules resume": "resume",
                                        "schedules trigger": "restart", "schedules delete": "discard"}

#: The queue commands (reliable.queue_pauses) and the operators-policy command each is checked as
#: on the queue: pausing a queue pauses its jobs to come, resuming it resumes them.
QUEUE_COMMANDS: Mapping[str, str] = {"queues pause": "pause", "queues resume": "resume"}

#: The commands on a worker process (reliable.process_commands) and the operators-policy command each
#: is checked as, on every queue the process consumes ("*" for a process consuming every queue):
#: quieting a process pauses the intake of its queues, resuming it resumes that intake (as a queue's
#: resume), stopping it stops the jobs it would run.
PROCESS_COMMANDS: Mapping[str, str] = {"workers quiet": "pause", "workers resume": "resume", "workers stop": "stop"}

#: An operator's change of an actor's concurrency limit (reliable.limits.operator), checked as the
#: policy's `pause` on the actor's queue ("*" when no job of it is known): it holds back its jobs to come.
LIMIT_COMMANDS: Mapping[str, str] = {"limits set": "pause"}

NEEDS_REASON: frozenset[str] = (COMMANDS | frozenset(SCHEDULE_COMMANDS) | frozenset(QUEUE_COMMANDS)
                                | frozenset(PROCESS_COMMANDS) | frozenset(LIMIT_COMMANDS))

#: The events each command may use: their source states are what a filter selects by default.
COMMAND_EVENTS: dict[str, tuple[Event, ...]] = {
    "pause": (Event.PAUSE, Event.PAUSE_REQUEST),
    "stop": (Event.STOP, Event.STOP_REQUEST),
    "cancel": (Event.CANCEL, Event.CANCEL_REQUEST),
    "resume": (Event.RESUME,),
    "restart": (Event.RESTART,),
    "requeue": (Event.REQUEUE,),
    "reconcile": (Event.RECONCILE_SUCCEEDED,),
    "discard": (),
}


def command_states(command: str) -> tuple[JobStatus, ...]:
    """The states `command` can act on (what a filter without --state selects)."""
    if command == "discard":
        return (JobStatus.DEAD,)
    events = COMMAND_EVENTS[command]
    return tuple(sorted({s for (s, e) in TRANSITIONS if e in events}, key=list(JobStatus).index))


def require_reason(command: str, reason: str | None) -> None:
    """Raise ReasonRequired when `command` needs a reason and `reason` is missing or blank, and
    TextTooLong when it is longer than `inputs.MAX_TEXT`.

    The one check of the rule: `Control` makes it before reading the job, the CLI before opening
    the store, so a forgotten or over-long reason writes nothing (no `command_refused` either).
    """
    check_reason(command, reason, required=command in NEEDS_REASON)


def check_reason_text(command: str, reason: str | None) -> None:
    """Raise InvalidReason when `reason` holds control characters (PostgreSQL's text cannot hold
    NUL): the one check, made by `Control` (which audits the refusal) and bulk operations."""
    check_reason_chars(command, reason)


@dataclass(frozen=True)
class CommandResult:
    """What one command did to one job.

    outcome: `done` (state changed), `requested` (a running job was flagged; its worker finishes
    the move), `dry_run` (nothing written: `message` says what would happen), `refused`. A refusal
    may carry a `hint` (what to do instead), which `message` ends with.
    """

    command: str
    job_id: str
    outcome: str
    message: str
    before: Job | None = None
    job: Job | None = None
    event: str | None = None
    dispatched: bool = False
    compensation: str | None = None
    warnings: tuple[str, ...] = ()
    hint: str | None = None

    @property
    def why(self) -> str:
        """The message without its hint, and without the `job <id>: ` it starts with: what many
        refusals of one kind share."""
        why = self.message.removesuffix(f"; {self.hint}") if self.hint else self.message
        return why.removeprefix(f"job {self.job_id}: ")

    @property
    def ok(self) -> bool:
        """Whether the command was (or, in a dry run, would be) carried out."""
        return self.outcome != "refused"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary."""
        return {
            "command": self.command, "job_id": self.job_id, "outcome": self.outcome, "message": self.message,
            "event": self.event, "status_before": self.before.status.value if self.before else None,
            "status": self.job.status.value if self.job else None,
            "version": self.job.version if self.job else None, "dispatched": self.dispatched,
            "compensation": self.compensation, "warnings": list(self.warnings),
        }


class JobCommands(Protocol):
    """What a command surface above single jobs (a workflow command) needs of `Control`: who acts,
    their permissions, the job commands, and the duplicate-side-effect guard of a re-run."""

    @property
    def identity(self) -> Operator:
        """Who is acting."""

    @property
    def operators(self) -> OperatorsPolicy:
        """The authorization policy the commands are checked against."""

    def with_detail(self, **detail: Any) -> JobCommands:
        """The same commands adding `detail` to every event they record."""

    def resume(self, job_id: str, *, reason: str | None = None, dry_run: bool = False) -> CommandResult:
        """Resume a PAUSED or STOPPED job."""

    def rerun_guard(self, job: Job, *, allow_duplicates: bool) -> tuple[str, ...]:
        """Refuse (ControlRefused) running `job`'s work again as a restart of it would be refused;
        the warnings when allowed."""
