"""The pure parts of failover support: multi-host store URLs and the replication report's verdicts."""

from __future__ import annotations

import pytest

from reliable.errors import ConfigError
from reliable.middleware import ReliableMiddleware
from reliable.redact import redact_url
from reliable.store.db import check_store_url
from reliable.store.engine import connect_engine
from reliable.store.replication import ReplicationReport, check_mode, parse_sync_names

TWO_HOSTS = [
    "postgresql+psycopg://app:secret@/jobs?host=10.0.0.1:5432&host=10.0.0.2:5433&target_session_attrs=read-write",
    "postgresql://app:secret@/jobs?host=10.0.0.1,10.0.0.2&port=5432,5433&target_session_attrs=primary",
]


@pytest.mark.parametrize("url", TWO_HOSTS)
def test_both_multi_host_forms_reach_libpq_as_host_and_port_lists(url: str) -> None:
    engine = connect_engine(url)
    try:
        _, params = engine.dialect.create_connect_args(engine.url)
    finally:
        engine.dispose()
    assert (params["host"], params["port"]) == ("10.0.0.1,10.0.0.2", "5432,5433")
    assert params["target_session_attrs"] in ("read-write", "primary")
    assert "secret" not in redact_url(engine.url)


@pytest.mark.parametrize("url", [
    "postgresql://app:secret@/jobs?host=10.0.0.1:5432&host=10.0.0.2:5433",
    "postgresql://app:secret@/jobs?host=10.0.0.1,10.0.0.2&port=5432,5433&target_session_attrs=any",
    "postgresql://app:secret@/jobs?host=a,b&port=1,2&target_session_attrs=standby",
])
def test_several_hosts_without_a_writable_session_are_refused_naming_the_setting(url: str) -> None:
    with pytest.raises(ConfigError, match="names 2 hosts, so it needs target_session_attrs=read-write") as caught:
        check_store_url(url)
    assert "secret" not in str(caught.value)


def test_a_host_list_in_the_url_host_part_needs_a_writable_session_too() -> None:
    url = "postgresql+psycopg://app@db1,db2/jobs"
    with pytest.raises(ConfigError, match="names 2 hosts, so it needs target_session_attrs=read-write"):
        check_store_url(url)
    engine = connect_engine(url + "?target_session_attrs=read-write")
    try:  # libpq gets it as a host list
        assert engine.dialect.create_connect_args(engine.url)[1]["host"] == "db1,db2"
    finally:
        engine.dispose()


def test_one_host_needs_no_session_attrs() -> None:
    assert check_store_url("postgresql://app@db:5432/jobs").host == "db"


def report(commit: str = "on", names: str = "", *standbys: tuple[str, str],
           in_recovery: bool = False, others: tuple[tuple[str, str, str], ...] = ()) -> ReplicationReport:
    return ReplicationReport(in_recovery=in_recovery, synchronous_commit=commit, synchronous_standby_names=names,
                             standbys=standbys, others=others)


def test_a_lone_server_and_a_synchronous_standby_are_safe() -> None:
    assert report().problems == []
    assert report("on", "standby1", ("standby1", "sync")).problems == []
    assert report("remote_apply", "ANY 2 (s1, s2)", ("s1", "quorum"), ("s2", "quorum")).problems == []
    assert report("on", "FIRST 2 (s1, s2, s3)", ("s1", "sync"), ("s2", "sync")).problems == []


@pytest.mark.parametrize(("value", "parsed"), [
    ("s1", ("FIRST", 1, ("s1",))),
    ("S1, s2", ("FIRST", 1, ("s1", "s2"))),
    ("2 (s1, s2, s3)", ("FIRST", 2, ("s1", "s2", "s3"))),
    ("first 1 (s1,s2)", ("FIRST", 1, ("s1", "s2"))),
    ('ANY 2 ("My Standby", s2)', ("ANY", 2, ("My Standby", "s2"))),
    ("*", ("FIRST", 1, ("*",))),
])
def test_synchronous_standby_names_is_parsed_as_postgresql_does(value: str, parsed: object) -> None:
    assert parse_sync_names(value) == parsed


def test_quorum_any_k_of_n_with_k_below_n_is_unsafe_to_promote_either_standby() -> None:
    problems = report("on", "ANY 1 (s1, s2)", ("s1", "quorum"), ("s2", "quorum")).problems
    assert len(problems) == 2 and all("may lack it" in problem for problem in problems), problems


def test_first_1_with_a_potential_standby_and_quorum_any_1_get_the_same_verdict() -> None:
    first = report("on", "FIRST 1 (s1, s2)", ("s1", "sync"), ("s2", "potential"))
    quorum = report("on", "ANY 1 (s1, s2)", ("s1", "quorum"), ("s2", "quorum"))
    assert first.problems and quorum.problems


@pytest.mark.parametrize("case", [
    report("on", "ANY 2 (s1, s2)", ("s1", "quorum")),
    report("on", "FIRST 2 (s1, s2, s3)", ("s1", "sync"), ("s2", "potential")),
])
def test_fewer_synchronous_standbys_connected_than_a_commit_waits_for_is_a_stall(case: ReplicationReport) -> None:
    assert any("commits wait until enough are" in problem for problem in case.problems), case.problems


def test_walsenders_that_are_not_standbys_are_notes_not_problems() -> None:
    others = (("pg_receivewal", "async", "archiver"), ("sub1", "async", "logical"))
    case = report("on", "standby1", ("standby1", "sync"), others=others)
    assert case.problems == []
    assert [note.split(" ")[0] for note in case.notes] == ["pg_receivewal", "sub1"]


def test_a_listed_archiver_counts_towards_the_quorum_so_the_standby_is_not_safe() -> None:
    case = report("on", "ANY 1 (barman, s1)", ("s1", "quorum"), others=(("barman", "quorum", "archiver"),))
    assert any("s1 (quorum)" in problem for problem in case.problems), case.problems


@pytest.mark.parametrize(("case", "expected"), [
    (report("on", "", ("standby1", "async")), "synchronous_standby_names is empty: standby standby1 (async)"),
    (report("local", "standby1", ("standby1", "sync")), "synchronous_commit is 'local'"),
    (report("off", "standby1", ("standby1", "sync")), "synchronous_commit is 'off'"),
    (report("on", "s1", ("s1", "sync"), ("s2", "async")), "standby s2 (async) is not synchronous"),
    (report("on", "FIRST 1 (s1, s2)", ("s1", "sync"), ("s2", "potential")), "standby s2 (potential) is not"),
    (report("on", "standby1"), "but 0 are connected (none): commits wait until enough are"),
    (report(in_recovery=True), "is a standby in recovery"),
    (report("on", "standby1", ("", "")), "cannot see its standbys' sync_state"),
])
def test_settings_that_can_lose_or_stall_commits_are_named(case: ReplicationReport, expected: str) -> None:
    assert any(expected in problem for problem in case.problems), case.problems


def test_the_replication_option_is_checked_at_install() -> None:
    assert check_mode("require_sync") == "require_sync"
    with pytest.raises(ConfigError, match="replication must be one of warn, require_sync, off, not 'strict'"):
        ReliableMiddleware("sqlite:///unused.db", replication="strict")
