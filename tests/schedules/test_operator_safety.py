"""Found by review: whose clock decides, deleting a schedule, the operators policy, bounded decisions."""

from __future__ import annotations

import pytest
from click.testing import CliRunner, Result
from schedules_support import T0, template

from reliable import PolicyError, Schedule, ScheduleNotFound
from reliable.cli.main import cli
from reliable.schedules import Scheduler, storage
from reliable.store import StateStore

from support import Clock

MINUTE = 60


def run(store_url: str, *args: str, operator: str = "carol") -> Result:
    return CliRunner().invoke(cli, ["schedules", *args, "--store", store_url],
                              env={"RELIABLE_OPERATOR": operator, "RELIABLE_BROKER": ""})


def test_the_stores_clock_decides_not_the_workers(clocked: tuple[StateStore, Clock]) -> None:
    store, clock = clocked
    storage.declare(store, Schedule("m", "work", every="15m"), template())
    scheduler = Scheduler(store, None)  # no clock of its own: the store's (the database's) decides
    clock.now = T0 + 5 * MINUTE
    assert scheduler.tick().fired == ()  # the 00:15 slot is not due by the store's clock
    clock.now = T0 + 15 * MINUTE
    assert [f.slot for f in scheduler.tick().fired] == [T0 + 15 * MINUTE]


def test_delete_is_audited_and_stops_the_schedule(clocked: tuple[StateStore, Clock], store_url: str) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("m", "work", every="1m"), template())
    Scheduler(store, None).tick(T0 + MINUTE)
    missing = run(store_url, "delete", "m")
    assert missing.exit_code == 2 and "needs a reason" in missing.output
    done = run(store_url, "delete", "m", "--reason", "the report was retired")
    assert done.exit_code == 0, done.output
    with pytest.raises(ScheduleNotFound):
        storage.get_schedule(store, "m")
    assert Scheduler(store, None).tick(T0 + 10 * MINUTE).fired == ()
    events = storage.list_events(store, "m")
    assert (events[-1].event, events[-1].operator, events[-1].reason) == ("delete", "carol", "the report was retired")
    assert storage.count_slots(store, ["m"]) == {"m": 1}  # the history stays


def test_the_operators_policy_applies_and_a_refusal_is_audited(clocked: tuple[StateStore, Clock], store_url: str,
                                                               tmp_path: object) -> None:
    store, _ = clocked
    storage.declare(store, Schedule("billing", "charge", every="1h"), template("charge", queue="billing"))
    policy = tmp_path / "operators.yaml"  # type: ignore[operator]
    policy.write_text("operators:\n  vic: [viewer]\n  opal: [ops]\nroles:\n  viewer: []\n"
                      "  ops:\n    - {commands: [pause, resume], queues: [billing]}\n")
    refused = run(store_url, "trigger", "billing", "--reason", "try", "--operators-file", str(policy),
                  "--broker", "amqp://guest:guest@127.0.0.1:1/", operator="vic")
    assert refused.exit_code == 1 and "may not restart jobs on queue 'billing'" in refused.output
    assert storage.list_events(store, "billing")[-1].event == "command_refused"
    paused = run(store_url, "pause", "billing", "--reason", "month end", "--operators-file", str(policy),
                 operator="opal")
    assert paused.exit_code == 0, paused.output
    assert storage.get_schedule(store, "billing").paused


def test_a_grace_covering_too_many_slots_and_a_cron_of_the_wrong_type_are_refused() -> None:
    with pytest.raises(PolicyError, match="misfire_grace of 86400s covers more than 1000 slots"):
        Schedule("s", "work", every=1, misfire_grace="1d")
    with pytest.raises(PolicyError, match="cron must be a string"):
        Schedule("s", "work", cron=[1])  # type: ignore[arg-type]
