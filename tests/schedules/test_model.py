"""Schedule declarations (code and YAML) and the misfire decision (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reliable import PolicyError, Schedule
from reliable.schedules import load_schedules, plan_misfire

MINUTE = 60


def minutely(**fields: object) -> Schedule:
    return Schedule("m", "work", every="1m", **fields)  # type: ignore[arg-type]


def test_defaults_and_normalised_values() -> None:
    s = Schedule("nightly", "export", cron="0 2 * * *", timezone="Europe/Paris", args=[1], kwargs={"a": "b"})
    assert (s.misfire, s.catch_up_max, s.grace, s.paused, s.args) == ("skip", 1, 60.0, False, (1,))
    assert Schedule("i", "work", every="1h30m").every == 5400
    assert Schedule("i", "work", every=90, misfire_grace="5m").grace == 300.0
    assert Schedule.from_definition(s.definition()) == s
    assert s.describe() == "cron 0 2 * * * (Europe/Paris)"


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"cron": "0 2 * * *", "every": "1m"}, "cron", "exactly one of cron and every"),
    ({}, "cron", "exactly one of cron and every"),
    ({"cron": "0 25 * * *"}, "cron", "hour: 25 is out of range"),
    ({"cron": "* * * * *", "timezone": "Paris"}, "timezone", "unknown time zone 'Paris'"),
    ({"every": "5 m"}, "every", "bad duration"),
    ({"every": "1.5s"}, "every", "whole number of seconds"),
    ({"every": 60, "timezone": "Europe/Paris"}, "timezone", "cron only"),
    ({"every": 60, "misfire": "later"}, "misfire", "skip, run_once, catch_up"),
    ({"every": 60, "misfire": "catch_up", "catch_up_max": 0}, "catch_up_max", "from 1 to 1000"),
    ({"every": 60, "catch_up_max": 3}, "catch_up_max", "catch_up only"),
    ({"every": 60, "misfire_grace": -1}, "misfire_grace", "zero or more"),
    ({"every": 60, "args": "x"}, "args", "must be a list"),
    ({"every": 60, "kwargs": {"when": object()}}, "kwargs", "JSON values"),
    ({"every": 60, "paused": "yes"}, "paused", "true or false"),
])
def test_bad_declarations_name_the_field(fields: dict[str, object], field: str, message: str) -> None:
    with pytest.raises(PolicyError, match=message) as caught:
        Schedule("s", "work", **fields)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_names_are_checked_and_unique() -> None:
    with pytest.raises(PolicyError, match="name must be a non-empty string"):
        Schedule(" s", "work", every=60)
    with pytest.raises(PolicyError, match="two schedules are named 's'"):
        load_schedules([Schedule("s", "a", every=60), Schedule("s", "b", every=60)])


YAML = """\
schedules:
  - name: nightly
    actor: export
    cron: "0 2 * * *"
    timezone: Europe/Paris
    kwargs: {account: a1}
    misfire: catch_up
    catch_up_max: 3
    misfire_grace: 5m
  - name: heartbeat
    actor: ping
    every: 90s
    paused: true
"""


def test_yaml_declarations(tmp_path: Path) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text(YAML)
    nightly, heartbeat = load_schedules(path)
    assert nightly == Schedule("nightly", "export", cron="0 2 * * *", timezone="Europe/Paris",
                               kwargs={"account": "a1"}, misfire="catch_up", catch_up_max=3, misfire_grace=300)
    assert (heartbeat.every, heartbeat.paused) == (90, True)
    assert load_schedules(str(path)) == (nightly, heartbeat)


@pytest.mark.parametrize(("change", "where"), [
    (("    timezone: Europe/Paris", "    timezone: Europe/Pariss"), ":5: unknown time zone 'Europe/Pariss'"),
    (("    every: 90s", "    every: soon"), ":12: bad duration 'soon'"),
    (("    paused: true", "    pause: true"), ":13: unknown key 'pause'"),
    (("  - name: heartbeat", "  - name: nightly"), ":10: two schedules are named 'nightly' (the other at line 2)"),
    (("    actor: ping\n", ""), ":10: a schedule needs actor"),
    (("    misfire: catch_up", "    misfire: [catch_up"), ": invalid YAML"),
])
def test_yaml_errors_name_file_line_and_field(tmp_path: Path, change: tuple[str, str], where: str) -> None:
    path = tmp_path / "schedules.yaml"
    path.write_text(YAML.replace(*change))
    with pytest.raises(PolicyError) as caught:
        load_schedules(path)
    assert str(caught.value).startswith(str(path)) and where in str(caught.value)


def test_yaml_shape(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("jobs: []\n")
    with pytest.raises(PolicyError, match="holds one key, schedules"):
        load_schedules(path)


# -- misfire ------------------------------------------------------------------------------------

START = 1_800_000_000 - 1_800_000_000 % 3600  # an hour boundary


def test_nothing_due() -> None:
    plan = plan_misfire(minutely(), START, START + 59)
    assert plan.fire == () and plan.watermark is None


def test_on_time_slots_fire_whatever_the_policy() -> None:
    for policy in ("skip", "run_once", "catch_up"):
        plan = plan_misfire(minutely(misfire=policy), START, START + MINUTE + 10)
        assert plan.fire == (START + MINUTE,) and plan.missed == 0 and plan.watermark == START + MINUTE


def test_after_a_two_hour_outage() -> None:
    now = START + 120 * MINUTE  # 120 slots due, the last one on time
    skip = plan_misfire(minutely(misfire_grace=30), START, now)
    assert skip.fire == (now,)
    assert (skip.missed, skip.skipped, skip.first_skipped, skip.last_skipped) == (119, 119, START + MINUTE,
                                                                                 now - MINUTE)
    once = plan_misfire(minutely(misfire="run_once", misfire_grace=30), START, now)
    assert once.fire == (now - MINUTE, now) and once.skipped == 118
    catch_up = plan_misfire(minutely(misfire="catch_up", catch_up_max=5, misfire_grace=30), START, now)
    assert catch_up.fire == tuple(now - k * MINUTE for k in range(5, -1, -1)) and catch_up.skipped == 114
    assert {skip.watermark, once.watermark, catch_up.watermark} == {now}


def test_grace_decides_what_is_late() -> None:
    plan = plan_misfire(minutely(misfire_grace="3m"), START, START + 10 * MINUTE)
    assert plan.fire == tuple(START + k * MINUTE for k in range(7, 11)) and plan.skipped == 6


def test_a_long_downtime_is_bounded_work() -> None:
    year = 366 * 86400
    plan = plan_misfire(minutely(misfire="catch_up", catch_up_max=3, misfire_grace=0), START, START + year)
    assert plan.fire == tuple(START + year - k * MINUTE for k in (3, 2, 1, 0))  # 3 missed, 1 on time
    assert not plan.counted and plan.watermark == START + year


@given(st.integers(min_value=0, max_value=600), st.sampled_from(["skip", "run_once", "catch_up"]),
       st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=400))
def test_misfire_properties(elapsed_minutes: int, policy: str, keep: int, grace: int) -> None:
    schedule = minutely(misfire=policy, catch_up_max=keep if policy == "catch_up" else 1, misfire_grace=grace)
    now = START + elapsed_minutes * MINUTE + 7
    plan = plan_misfire(schedule, START, now)
    due = [START + k * MINUTE for k in range(1, elapsed_minutes + 1)]
    on_time = [s for s in due if now - s <= grace]
    missed = [s for s in due if now - s > grace]
    allowed = {"skip": 0, "run_once": 1, "catch_up": keep}[policy]
    assert list(plan.fire) == missed[len(missed) - min(allowed, len(missed)):] + on_time
    assert plan.missed == len(missed) and plan.skipped == len(missed) - min(allowed, len(missed))
    assert plan.watermark == (due[-1] if due else None)
