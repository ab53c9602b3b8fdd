"""`reliable policy check` and `reliable policy explain`, run as a user would (subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository
POLICIES = "policies"  # relative to ROOT, the commands' cwd
RELIABLE = str(Path(sys.executable).parent / "reliable")
BAD = ROOT / "tests" / "policy" / "bad"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RELIABLE, "policy", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_check_ok() -> None:
    done = run("check", f"{POLICIES}/examples/http_api.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK: 9 user rules + 12 built-in rules, 2 actors"
    assert done.stderr == ""  # no warning: its retrying rules say `idempotent: true`
    # The shipped folder: app.yaml (empty) only; builtin/default.yaml is not loaded a second time.
    assert run("check", f"{POLICIES}").stdout.strip() == "OK: 0 user rules + 12 built-in rules, 0 actors"


def test_check_bad_file_one_line_per_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("lease:\n  ttl: 5s\n  heartbeat_interval: 9s\nrules:\n  - exception: nope.Error\n    class: wat\n")
    done = run("check", str(path))
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"{path}:3: lease.heartbeat_interval: lease.heartbeat_interval (9s) must be less than lease.ttl (5s)",
        f"{path}:5: rule 'rule-1' exception: unknown exception path: cannot import module 'nope' for exception "
        "'nope.Error' (is it installed, and is the current directory on the import path?)",
        f"{path}:6: rules[0].class: unknown error class 'wat'; expected one of: authorization, invalid_input, "
        "rate_limited, side_effect_unknown, transient (or define it under 'classes')",
    ]
    assert "Traceback" not in done.stderr


def test_check_bad_files_without_traceback() -> None:
    # Every bad file is checked through the API in test_policy_load; a few kinds here end to end.
    for name in ("bad_yaml_syntax", "not_a_mapping", "duplicate_key", "shadowed_rule"):
        path = BAD / f"{name}.yaml"
        done = run("check", str(path))
        assert done.returncode == 2, path
        assert "Traceback" not in done.stderr
        assert done.stderr.startswith(f"{path}:"), done.stderr


def test_check_imports_project_modules_from_the_current_directory(tmp_path: Path) -> None:
    (tmp_path / "myapp_errors_for_test.py").write_text("class Flaky(Exception):\n    pass\n")
    (tmp_path / "p.yaml").write_text("rules:\n  - {exception: myapp_errors_for_test.Flaky, class: transient}\n")
    done = run("check", "p.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK: 1 user rules + 12 built-in rules, 0 actors"


def test_check_missing_path() -> None:
    done = run("check", "no/such/dir")
    assert done.returncode == 2
    assert done.stderr.strip() == "no/such/dir: no such policy file or directory"


def test_explain_json() -> None:
    done = run("explain", f"{POLICIES}/examples/http_api.yaml", "--exception", "httpx.HTTPStatusError",
               "--status", "429", "--retry-after", "30", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    decision = out["decision"]
    assert (decision["action"], decision["error_class"], decision["delay"]) == ("retry", "rate_limited", 30.0)
    assert decision["rule"] == f"{POLICIES}/examples/http_api.yaml:33 (throttled)"
    assert out["rules_tried"][-1]["matches"] is True


def test_explain_queue_and_subclass() -> None:
    done = run("explain", f"{POLICIES}/examples/http_api.yaml", "--exception", "httpx.ReadTimeout", "--queue",
               "payments", "--json")
    out = json.loads(done.stdout)
    assert out["decision"]["action"] == "review"
    assert out["decision"]["rule"].endswith("(maybe-charged)")
    done = run("explain", f"{POLICIES}/examples/http_api.yaml", "--exception", "httpx.ReadTimeout", "--json")
    assert json.loads(done.stdout)["decision"]["rule"].endswith("(timeouts)")  # a subclass of TimeoutException


def test_explain_text_and_unknown_exception() -> None:
    done = run("explain", f"{POLICIES}/builtin/default.yaml", "--exception", "acme.errors.Unauthorized",
               "--status", "401", "--message", "token expired")
    assert done.returncode == 0, done.stderr
    assert "HALT" in done.stdout
    assert "http-auth" in done.stdout
    assert "matching by name only" in done.stdout
    retry = run("explain", f"{POLICIES}/builtin/default.yaml", "--exception", "TimeoutError", "--attempt", "2")
    assert "RETRY in" in retry.stdout and "jitter: between 0ms and 2s" in retry.stdout


def test_explain_bad_policy_is_one_line_exit_2() -> None:
    done = run("explain", str(BAD / "unknown_class.yaml"), "--exception", "TimeoutError")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {BAD / 'unknown_class.yaml'}:5: unknown error class 'transcient'; expected one of: authorization, "
        "invalid_input, rate_limited, side_effect_unknown, transient (or define it under 'classes') "
        "(field: rules[0].class)"
    ]


# -- extension, warnings, the built-in policy and --app ------------------------------------------------

APP = """\
import dramatiq
from dramatiq.brokers.stub import StubBroker

import reliable

broker = StubBroker()
reliable.install(broker, store="sqlite:///{db}", policies="{policy}")


@dramatiq.actor(broker=broker, queue_name="payments", idempotent=False, max_retries=2)
def charge(order_id: str) -> None:
    pass


@dramatiq.actor(broker=broker, queue_name="emails")
def send_email(to: str) -> None:
    pass
"""


def shop_app(folder: Path) -> Path:
    """A Dramatiq app module `shopapp` in `folder` installing reliable with a policy that sets an owner."""
    policy = folder / "shop_policy.yaml"
    policy.write_text("defaults:\n  owner: team-shop\n")
    (folder / "shopapp.py").write_text(APP.format(db=folder / "r.db", policy=policy))
    return policy


def test_check_without_a_path_and_with_inherit_false(tmp_path: Path) -> None:
    assert run("check").stdout.strip() == "OK: the built-in policy, 12 rules, 0 actors"
    (tmp_path / "p.yaml").write_text("inherit: false\nrules:\n  - {exception: TimeoutError, class: transient}\n")
    done = run("check", "p.yaml", cwd=tmp_path)
    assert done.stdout.strip() == "OK: 1 user rules (built-in rules dropped: inherit: false), 0 actors"


def test_check_warns_on_retrying_a_non_idempotent_job_exit_0(tmp_path: Path) -> None:
    shop_app(tmp_path)
    (tmp_path / "p.yaml").write_text("rules:\n  - name: network\n    exception: httpx.TransportError\n"
                                     "    class: transient\n")
    plain = run("check", "p.yaml", cwd=tmp_path)
    assert (plain.returncode, plain.stderr) == (0, "")  # nothing non-idempotent without the app's actors
    done = run("check", "p.yaml", "--app", "shopapp", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK: 1 user rules + 12 built-in rules, 0 actors, 2 app actors; 1 warning(s)"
    [warning] = done.stderr.strip().splitlines()
    assert warning.startswith("p.yaml:2: warning: rule 'network' (class transient) retries httpx.ReadTimeout")
    assert "actor 'charge' (queue 'payments'), which is not idempotent (shopapp.charge)" in warning


def test_explain_without_a_path_uses_the_builtin_policy() -> None:
    done = run("explain", "--exception", "httpx.ReadTimeout", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["policy"] == ["<built-in>"] and out["queue"] == "default"
    assert (out["decision"]["action"], out["decision"]["rule"]) == ("retry", "<built-in> (http-transport)")
    ambiguous = next(r for r in out["rules_tried"] if r["rule"] == "<built-in> (ambiguous-after-send)")
    assert ambiguous["applies"] is False  # the default contract is idempotent
    text = run("explain", "--exception", "httpx.ReadTimeout").stdout
    assert "skipped: the job is idempotent" in text
    assert run("explain").returncode == 2


def test_explain_with_app_shows_each_actors_contract_and_decision(tmp_path: Path) -> None:
    policy = shop_app(tmp_path)
    done = run("explain", "--app", "shopapp", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["policy"] == ["<built-in>", str(policy)]  # the policy the app installed
    contracts = {a["actor"]: (a["queue"], a["contract"]) for a in out["actors"]}
    assert set(contracts) == {"charge", "send_email"}
    queue, charge = contracts["charge"]
    assert (queue, charge["idempotent"], charge["max_attempts"], charge["retry_on_crash"], charge["owner"]) == \
        ("payments", False, 3, False, "team-shop")
    assert contracts["send_email"][1]["idempotent"] is True
    per_actor = json.loads(run("explain", "--app", "shopapp", "--exception", "httpx.ReadTimeout", "--json",
                               cwd=tmp_path).stdout)
    actions = {a["actor"]: (a["decision"]["action"], a["decision"]["error_class"]) for a in per_actor["actors"]}
    assert actions == {"charge": ("review", "side_effect_unknown"), "send_email": ("retry", "transient")}
    one = json.loads(run("explain", "--app", "shopapp", "--actor", "charge", "--exception", "httpx.ConnectError",
                         "--json", cwd=tmp_path).stdout)
    assert (one["queue"], one["decision"]["action"], one["contract"]["max_attempts"]) == ("payments", "retry", 3)
    given = json.loads(run("explain", str(SHIPPED / "policies/builtin/default.yaml"), "--app", "shopapp", "--actor",
                           "charge", "--exception", "httpx.ReadTimeout", "--json", cwd=tmp_path).stdout)
    assert given["policy"] == ["<built-in>", str(SHIPPED / "policies/builtin/default.yaml")]  # PATH wins over the app's
    assert given["decision"]["action"] == "review" and given["contract"]["owner"] is None


def test_explain_app_errors_are_one_line(tmp_path: Path) -> None:
    shop_app(tmp_path)
    for args, fragment in ((("--app", "no_such_app_xyz"), "importing 'no_such_app_xyz' failed"),
                           (("--app", "shopapp:nope"), "shopapp.nope is not a Dramatiq broker"),
                           (("--app", "shopapp", "--actor", "ghost"), "no actor 'ghost'")):
        done = run("explain", *args, cwd=tmp_path)
        assert done.returncode == 2, args
        assert len(done.stderr.strip().splitlines()) == 1 and fragment in done.stderr, done.stderr


def test_check_with_app_refuses_sections_naming_no_actor_or_queue_of_the_app(tmp_path: Path) -> None:
    shop_app(tmp_path)  # actors charge (queue payments) and send_email
    (tmp_path / "p.yaml").write_text("actors:\n  charge:\n    max_attempts: 3\n  chrage:\n    max_attempts: 2\n"
                                     "queues:\n  paymnets:\n    max_attempts: 2\n")
    done = run("check", "p.yaml", "--app", "shopapp", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "p.yaml:4: actors.chrage: the app declares no actor 'chrage': did you mean 'charge'? this section applies "
        "to nothing (fix the name, or remove the section)",
        "p.yaml:7: queues.paymnets: the app declares no queue 'paymnets': did you mean 'payments'? this section "
        "applies to nothing (fix the name, or remove the section)",
    ]
    assert "OK" not in done.stdout
    as_json = json.loads(run("check", "p.yaml", "--app", "shopapp", "--json", cwd=tmp_path).stdout)
    assert not as_json["ok"]
    assert [(p["line"], p["field"]) for p in as_json["problems"]] == [(4, "actors.chrage"), (7, "queues.paymnets")]
    plain = run("check", "p.yaml", cwd=tmp_path)  # without the app nothing is known to compare
    assert (plain.returncode, plain.stderr) == (0, "")


def test_check_with_app_accepts_sections_naming_its_actors_queues_and_lanes(tmp_path: Path) -> None:
    shop_app(tmp_path)
    (tmp_path / "p.yaml").write_text(
        "actors:\n  send_email:\n    max_attempts: 3\nqueues:\n  payments:\n    max_attempts: 2\n"
        "  slow_lane:\n    max_attempts: 2\n"
        "rules:\n  - {exception: TimeoutError, class: transient, queue: slow_lane}\n")
    done = run("check", "p.yaml", "--app", "shopapp", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("OK: 1 user rules"), done.stdout
