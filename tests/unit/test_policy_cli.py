"""`reliable policy check` and `reliable policy explain`, run as a user would (subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RELIABLE = str(Path(sys.executable).parent / "reliable")
BAD = ROOT / "tests" / "policy" / "bad"


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RELIABLE, "policy", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_check_ok() -> None:
    done = run("check", "policies/examples/http_api.yaml")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "OK: 9 user rules + 10 built-in rules, 2 actors"
    assert done.stderr == ""  # no warning: its retrying rules say `idempotent: true`
    assert run("check", "policies").stdout.strip() == "OK: 10 user rules + 10 built-in rules, 0 actors"


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
    assert done.stdout.strip() == "OK: 1 user rules + 10 built-in rules, 0 actors"


def test_check_missing_path() -> None:
    done = run("check", "no/such/dir")
    assert done.returncode == 2
    assert done.stderr.strip() == "no/such/dir: no such policy file or directory"


def test_explain_json() -> None:
    done = run("explain", "policies/examples/http_api.yaml", "--exception", "httpx.HTTPStatusError",
               "--status", "429", "--retry-after", "30", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    decision = out["decision"]
    assert (decision["action"], decision["error_class"], decision["delay"]) == ("retry", "rate_limited", 30.0)
    assert decision["rule"] == "policies/examples/http_api.yaml:33 (throttled)"
    assert out["rules_tried"][-1]["matches"] is True


def test_explain_queue_and_subclass() -> None:
    done = run("explain", "policies/examples/http_api.yaml", "--exception", "httpx.ReadTimeout", "--queue",
               "payments", "--json")
    out = json.loads(done.stdout)
    assert out["decision"]["action"] == "review"
    assert out["decision"]["rule"].endswith("(maybe-charged)")
    done = run("explain", "policies/examples/http_api.yaml", "--exception", "httpx.ReadTimeout", "--json")
    assert json.loads(done.stdout)["decision"]["rule"].endswith("(timeouts)")  # a subclass of TimeoutException


def test_explain_text_and_unknown_exception() -> None:
    done = run("explain", "policies/default.yaml", "--exception", "acme.errors.Unauthorized", "--status", "401",
               "--message", "token expired")
    assert done.returncode == 0, done.stderr
    assert "HALT" in done.stdout
    assert "http-auth" in done.stdout
    assert "matching by name only" in done.stdout
    retry = run("explain", "policies/default.yaml", "--exception", "TimeoutError", "--attempt", "2")
    assert "RETRY in" in retry.stdout and "jitter: between 0ms and 2s" in retry.stdout


def test_explain_bad_policy_is_one_line_exit_2() -> None:
    done = run("explain", str(BAD / "unknown_class.yaml"), "--exception", "TimeoutError")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"error: {BAD / 'unknown_class.yaml'}:5: unknown error class 'transcient'; expected one of: authorization, "
        "invalid_input, rate_limited, side_effect_unknown, transient (or define it under 'classes') "
        "(field: rules[0].class)"
    ]
