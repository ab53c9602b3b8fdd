"""What every `reliable` command shares: one duration grammar, `--state`, env vars in --help, `--json`."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from reliable.cli.common import Duration
from reliable.cli.exporter import _parse_sla
from reliable.cli.main import cli
from reliable.states import JobStatus
from reliable.store import NewJob, StateStore, migrate

from support import cli_commands

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository
TIME_OPTIONS = {"--older-than", "--interval", "--sweep-after"}
#: Commands with no --json, and why.
NO_JSON = {
    ("demo",): "a story told to a person, checked against the store by its exit status",
    ("exporter",): "an HTTP server: it prints only the address it listens on (stderr)",
    ("web",): "an HTTP server: it logs requests (its JSON is the API it serves)",
    ("worker",): "a process supervisor: its events are JSON lines on stderr, its figures are metrics",
}


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"RELIABLE_OPERATOR": "carol"})


def options(command: click.Command) -> list[click.Option]:
    return [p for p in command.params if isinstance(p, click.Option)]


def test_every_env_var_a_command_reads_is_in_its_help() -> None:
    checked = set()
    for path, command in cli_commands():
        names = [n for o in options(command) for n in ([o.envvar] if isinstance(o.envvar, str) else o.envvar or [])]
        if any("--operator" in o.opts for o in options(command)):
            names.append("RELIABLE_OPERATOR")  # read by Operator.resolve when --operator is not given
        if not names:
            continue
        text = run(*path, "--help").output
        for name in names:
            assert name in text, f"reliable {' '.join(path)} --help does not mention {name}"
            checked.add(name)
    assert {"RELIABLE_STORE", "RELIABLE_ALERT_RULES", "RELIABLE_ALERT_CONFIG", "RELIABLE_OPERATORS_FILE",
            "RELIABLE_OPERATOR", "RELIABLE_BROKER", "RELIABLE_POLICIES"} <= checked


def test_every_command_that_prints_has_json() -> None:
    missing = [" ".join(path) for path, command in cli_commands()
               if path not in NO_JSON and not any("--json" in o.opts for o in options(command))]
    assert missing == []


def test_every_time_option_takes_the_one_duration_grammar() -> None:
    found = [(path, o) for path, command in cli_commands() for o in options(command) if TIME_OPTIONS & set(o.opts)]
    assert len(found) >= 15  # alerts run, recover (2), dlq and review list, and the 10 control commands
    for path, option in found:
        assert isinstance(option.type, Duration), f"reliable {' '.join(path)} {option.opts[0]}"


FORMS = "(1h30m, 90s, 500ms)"


@pytest.mark.parametrize(("args", "option", "says"), [
    (["recover", "--once", "--interval", "5x"], "--interval", FORMS),
    (["recover", "--once", "--interval", "0"], "--interval", "expected more than zero"),
    (["recover", "--once", "--sweep-after", "-5m"], "--sweep-after", "expected zero or more"),
    (["alerts", "run", "--once", "--interval", "1m1m"], "--interval", FORMS),
    (["dlq", "list", "--older-than", "5 minutes"], "--older-than", FORMS),
    (["review", "list", "--older-than", "1H"], "--older-than", FORMS),
    (["pause", "--queue", "exports", "--older-than", "30m1h", "--yes"], "--older-than", FORMS),
])
def test_a_bad_duration_names_the_option_and_changes_nothing(sqlite_url: str, args: list[str], option: str,
                                                             says: str) -> None:
    store = StateStore(sqlite_url)
    store.register(NewJob("j1", "exports", "export", {}))
    result = run(*args, "--store", sqlite_url)
    assert result.exit_code == 2
    assert f"Invalid value for '{option}': bad duration" in result.output and says in result.output
    assert store.get("j1").status is JobStatus.PENDING and len(store.events("j1")) == 1


def test_exporter_sla_takes_durations() -> None:
    assert _parse_sla(("running=1h30m", "PAUSED=2d", "STOPPING=90")) == {"RUNNING": 5400.0, "PAUSED": 172800.0,
                                                                         "STOPPING": 90.0}
    with pytest.raises(click.BadParameter, match="bad duration"):
        _parse_sla(("RUNNING=5 minutes",))
    with pytest.raises(click.BadParameter, match="STATE=DURATION"):
        _parse_sla(("RUNNING",))


def test_older_than_selects_by_the_database_clock(store: StateStore, store_url: str) -> None:
    store.register(NewJob("j1", "exports", "export", {}))
    base = ("pause", "--queue", "exports", "--yes", "--reason", "t", "--dry-run", "--json", "--store", store_url)
    assert json.loads(run(*base, "--older-than", "1h30m").stdout)["matched"] == 0
    assert json.loads(run(*base, "--older-than", "0s").stdout)["matched"] == 1
    assert json.loads(run(*base, "--older-than", "0").stdout)["matched"] == 1


def test_state_in_any_case_and_status_as_a_hidden_deprecated_alias(sqlite_url: str) -> None:
    store = StateStore(sqlite_url)
    store.register(NewJob("p", "exports", "export", {}))
    store.register(NewJob("r", "exports", "export", {}))
    store.claim("r", worker_id="w", lease_ttl=60)
    listed = run("jobs", "list", "--state", "running", "--json", "--store", sqlite_url)
    assert [j["job_id"] for j in json.loads(listed.stdout)] == ["r"] and listed.stderr == ""
    old = run("jobs", "list", "--status", "RUNNING", "--json", "--store", sqlite_url)
    assert json.loads(old.stdout) == json.loads(listed.stdout)
    assert "--status is deprecated, use --state" in old.stderr
    both = run("jobs", "list", "--state", "Pending", "--status", "running", "--json", "--store", sqlite_url)
    assert sorted(j["job_id"] for j in json.loads(both.stdout)) == ["p", "r"]
    bad = run("jobs", "list", "--state", "sleeping", "--store", sqlite_url)
    assert bad.exit_code == 2 and "Invalid value for '--state'" in bad.output
    paused = run("pause", "--state", "pending", "--queue", "exports", "--yes", "--reason", "t", "--json",
                 "--store", sqlite_url)
    assert [r["job_id"] for r in json.loads(paused.stdout)["results"]] == ["p"]
    for path in (("jobs", "list"), ("pause",), ("review", "resolve"), ("exporter",)):
        text = run(*path, "--help").output
        assert "--state" in text and "--status" not in text, path


def test_review_resolve_is_reconcile() -> None:
    ctx = click.Context(cli)
    review = cli.get_command(ctx, "review")
    assert isinstance(review, click.Group)
    assert review.get_command(ctx, "resolve") is cli.get_command(ctx, "reconcile")
    assert "alias" in run("review", "resolve", "--help").output
    assert "alias of `reliable reconcile`" in run("review", "--help").output


def test_db_upgrade_and_current_json(tmp_path: Path) -> None:
    (tmp_path / "fresh.db").touch()  # an empty database: only `db upgrade` creates a missing file
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    first = json.loads(run("db", "current", "--store", url, "--json").stdout)
    assert first["current"] is None and first["up_to_date"] is False
    done = json.loads(run("db", "upgrade", "--store", url, "--json").stdout)
    assert done["before"] is None and done["after"] == migrate.head_revision()
    assert [s["revision"] for s in done["applied"]][-1] == done["after"] and len(done["applied"]) >= 7
    again = json.loads(run("db", "upgrade", "--store", url, "--json").stdout)
    assert again["before"] == again["after"] and again["applied"] == []
    assert json.loads(run("db", "current", "--store", url, "--json").stdout)["up_to_date"] is True


def test_db_upgrade_text_lists_each_migration(tmp_path: Path) -> None:
    out = run("db", "upgrade", "--store", f"sqlite:///{tmp_path / 'fresh.db'}").stdout.splitlines()
    assert out[0].startswith("applied 0001: Initial schema") and "migrated empty -> " in out[-1]


def test_recover_json_one_object_per_pass(sqlite_url: str) -> None:
    result = run("recover", "--once", "--json", "--store", sqlite_url)
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    assert json.loads(line) == {"expired": {}, "retried": [], "redispatched": [], "lost_races": 0,
                                "expiry_held": False, "workflows": 0}


def test_policy_check_json(tmp_path: Path) -> None:
    good = run("policy", "check", "--json")
    assert good.exit_code == 0 and json.loads(good.stdout)["ok"] is True
    bad_file = ROOT / "tests" / "policy" / "bad" / "bad_duration.yaml"
    bad = run("policy", "check", str(bad_file), "--json")
    assert bad.exit_code == 2
    (problem,) = json.loads(bad.stdout)["problems"]
    assert problem["path"] == str(bad_file) and "bad duration '5 minutes'" in problem["message"]
    assert problem["field"] and "1h30m" in problem["message"]


def test_alerts_check_json(tmp_path: Path) -> None:
    good = run("alerts", "check", str(SHIPPED / "alert_rules"), "--runbooks", str(SHIPPED / "runbooks"), "--json")
    assert good.exit_code == 0 and json.loads(good.stdout)["ok"] is True
    (tmp_path / "r.yaml").write_text("rules:\n  - name: A\n    kind: store\n"
                                     "    condition: {type: stuck, older_than: 1h}\n    for: 1m1m\n"
                                     "    severity: info\n    owner: t\n    route: page\n")
    bad = run("alerts", "check", str(tmp_path), "--runbooks", str(SHIPPED / "runbooks"), "--json")
    assert bad.exit_code == 2
    (problem,) = json.loads(bad.stdout)["problems"]
    assert (problem["line"], problem["field"]) == (5, "for") and "bad duration '1m1m'" in problem["message"]


def test_alerts_run_json_one_object_per_cycle(sqlite_url: str) -> None:
    result = run("alerts", "run", "--once", "--json", "--store", sqlite_url, "--rules", str(SHIPPED / "alert_rules"),
                 "--runbooks", str(SHIPPED / "runbooks"), "--alertmanager", "http://127.0.0.1:9", "--interval", "1m30s")
    assert result.exit_code == 0, result.output
    (line,) = result.stdout.splitlines()
    cycle = json.loads(line)
    assert cycle["firing"] == [] and cycle["sent"] == 0 and cycle["rules"] > 0


def test_alerts_export_prometheus_json() -> None:
    result = run("alerts", "export-prometheus", "--rules", str(SHIPPED / "alert_rules"), "--json")
    groups = json.loads(result.stdout)["groups"]
    assert any(rule.get("alert") == "ReliableHeartbeatFailures" for group in groups for rule in group["rules"])
