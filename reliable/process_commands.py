"""Quieting and stopping a worker process: an operator's command kept in the store, picked up by the
process's heartbeat.

`quiet` asks the process to take no new message and finish the running ones: its deliveries are put
off as a paused queue's are (`reliable.worker.paused`: published again later, skipped before their
claim, the job PENDING with no attempt spent), so the other processes take them. `stop` asks for a
graceful shutdown of that process, the way a SIGTERM does (running jobs finish, prefetched messages go
back to RabbitMQ); a `reliable worker` child leaves with `exits.CHILD_STOPPED` and its supervisor
starts a fresh child in its slot (a stop is not a crash). A process sees its command within one
heartbeat interval (`reliable.worker.commands`).

`resume` takes a quiet off: the process's next heartbeat reads no command and it takes messages
again (its deliveries put off meanwhile come back at their next try, as a resumed queue's do). Only a
quiet process can be resumed: one with no command, or told to stop (a stop is never taken back), is
ControlRefused (HTTP 409) saying which.

All three are audited in `reliable_process_events` (who, when, from where, why), and so is a command
the operators policy refuses (`command_refused`): a process command is checked as the policy's `pause`
(quiet), `resume` or `stop` on every queue the process consumes ("*" when it consumes every queue,
`commands.PROCESS_COMMANDS`). Every command needs a reason. A process marked exited cannot be
commanded (ControlRefused: HTTP 409); an unknown worker id is ProcessNotFound (HTTP 404).
"""

from __future__ import annotations

from .commands import PROCESS_COMMANDS, check_reason_text, require_reason
from .errors import ConfigError, ControlRefused, NotAuthorized, ProcessNotFound
from .inputs import MAX_NAME, escape_controls, text_problem
from .operators import Operator, OperatorsPolicy
from .store import StoreCore
from .store.process_commands import COMMANDS, SetOutcome, add_event, clear_quiet, set_command
from .store.processes import WorkerProcess, get_process

__all__ = ["COMMANDS", "VERBS", "allowed", "check_worker_id", "command", "policy_queues"]

#: Every command an operator gives a process: the ones it acts on (COMMANDS: quiet, stop) and resume,
#: which takes a quiet off.
VERBS: tuple[str, ...] = ("quiet", "resume", "stop")


def check_worker_id(worker_id: str) -> str:
    """`worker_id`, or ConfigError naming the field 'worker_id' when it cannot be one."""
    problem = ("it is empty" if not worker_id else f"it is longer than {MAX_NAME} characters"
               if len(worker_id) > MAX_NAME else text_problem(worker_id))
    if problem is not None:
        raise ConfigError(f"field 'worker_id': {problem}")
    return worker_id


def policy_queues(process: WorkerProcess) -> tuple[str, ...]:
    """The queues a command on `process` is checked on: its queues, or "*" when it consumes every queue."""
    return tuple(process.queues) if process.queues else ("*",)


def allowed(policy: OperatorsPolicy, name: str, verb: str, process: WorkerProcess) -> bool:
    """Whether `name` may `verb` (quiet, resume, stop) `process` (for buttons; `command` decides)."""
    what = PROCESS_COMMANDS[f"workers {verb}"]
    return all(policy.allows(name, what, queue, None) for queue in policy_queues(process))


def command(store: StoreCore, worker_id: str, verb: str, *, reason: str | None, identity: Operator,
            operators: OperatorsPolicy | None = None) -> bool:
    """Quiet, resume or stop (`verb`) the process `worker_id` as `identity` (audited); False when it
    already had that command (or a stop: quiet and stop only). ProcessNotFound when no such process is
    on record; NotAuthorized (audited as `command_refused`) unless the operators policy allows it on
    every queue of the process; ControlRefused when the process has exited, or (resume) is not quiet."""
    if verb not in VERBS:
        raise ConfigError(f"field 'command': unknown process command {verb!r} (known: {', '.join(VERBS)})")
    name = f"workers {verb}"
    check_worker_id(worker_id)
    require_reason(name, reason)
    assert reason is not None
    process = get_process(store, worker_id)
    policy = operators or OperatorsPolicy.allow_all()
    try:
        check_reason_text(name, reason)
        if process is None:
            raise ProcessNotFound(worker_id)
        for queue in policy_queues(process):
            policy.check(identity.name, PROCESS_COMMANDS[name], queue, None)
    except (NotAuthorized, ConfigError) as exc:
        if process is not None:
            add_event(store, worker_id, "command_refused", operator=identity.name, host=identity.host,
                      source=identity.source, reason=escape_controls(reason), detail={"command": name, "why": str(exc)})
        raise
    who = f"worker process {worker_id} (pid {process.pid} on {process.host})"
    if verb == "resume":
        resumed = clear_quiet(store, process.worker_id, operator=identity.name, host=identity.host,
                              source=identity.source, reason=reason)
        if resumed == "stopping":
            raise ControlRefused(f"{who} is stopping, not quiet: a stop is not taken back",
                                 hint="a fresh process takes its place (under a supervisor)")
        if resumed == "not_quiet":
            raise ControlRefused(f"{who} is not quiet: nothing to resume",
                                 hint="it takes messages already: refresh the workers page")
        outcome: SetOutcome = "set" if resumed == "resumed" else resumed
    else:
        outcome = set_command(store, process.worker_id, verb, operator=identity.name, host=identity.host,
                              source=identity.source, reason=reason)
    if outcome == "missing":
        raise ProcessNotFound(process.worker_id)
    if outcome == "exited":
        raise ControlRefused(f"{who} has exited", hint=f"nothing to {verb}: refresh the workers page")
    return outcome == "set"
