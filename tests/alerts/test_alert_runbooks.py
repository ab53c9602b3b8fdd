"""Runbooks render job values as inert data: template syntax and HTML in an error message do nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from reliable.alerts import parse_rules
from reliable.alerts.model import Candidate, build_labels
from reliable.alerts.runbooks import RunbookRenderer, next_actions, safe_url
from reliable.errors import ConfigError, PolicyError
from reliable.store.alert_facts import JobFact
from reliable.store.alert_queries import AttemptFact, JobContext

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT  # policies/, alert_rules/, runbooks/: the shipped defaults, at the top of the repository
EVIL = "boom {{ 7*7 }} {% for x in range(3) %}loop{% endfor %} <script>alert(1)</script> {{ ''.__class__ }}" + "x" * 900


def _rule(runbook: str = "job_stuck.md.j2"):  # type: ignore[no-untyped-def]
    (rule,) = parse_rules(f"""rules:
  - name: JobStuck
    kind: store
    condition: {{type: stuck, older_than: 1m}}
    severity: warning
    owner: from_job
    route: notify
    annotations:
      summary: "Job {{{{ labels.job_id }}}} stuck"
      description: "{{% for j in jobs %}}{{{{ j.last_error_message }}}}{{% endfor %}}"
    runbook: {runbook}
""", "inline.yaml")
    return rule


def _context(message: str) -> tuple[Candidate, list[JobContext]]:
    job = JobFact(job_id="job-1", queue="exports", actor="export", status="RUNNING", since=0.0, owner="team-data",
                  attempt=2, attempt_id="att-2", checkpoint='{"page": 7}', checkpoint_at=1_800_000_000.0,
                  last_error_class="transient", last_error_message=message, trace_id="tr 1&x")
    rule = _rule()
    labels = build_labels(rule, queue="exports", actor="export", owner="team-data",
                          extra={"job_id": "job-1", "state": "RUNNING"})
    attempts = (AttemptFact("att-2", 2, "w1", 1.0, None, None, None), AttemptFact("att-1", 1, "w1", 0.5, 0.9,
                                                                                   "lease_expired", "crash"))
    return Candidate(rule, labels, 120.0, {"age": 120.0}, (job,)), [JobContext(job, attempts)]


def renderer() -> RunbookRenderer:
    return RunbookRenderer(SHIPPED / "runbooks", base_url="https://runbooks.example/",
                           links={"logs": "https://logs.example/?q={job_id}&t={trace_id}",
                                  "traces": "https://traces.example/trace/{trace_id}"})


def test_error_message_renders_inert() -> None:
    candidate, jobs = _context(EVIL)
    out = renderer().annotations(candidate, jobs)
    for text in (renderer().runbook(candidate, jobs) or "", out["description"]):
        assert "{{ 7*7 }}" in text  # literally, not evaluated
        assert "49" not in text
        assert "{% for x in range(3) %}loop{% endfor %}" in text and "looploop" not in text
        assert "<script>" not in text and "&lt;script&gt;" in text
        assert "class &#39;str&#39;" not in text and "__class__" in text
        assert "x" * 400 not in text  # truncated
    assert out["summary"] == "Job job-1 stuck"
    assert out["runbook_url"] == "https://runbooks.example/jobstuck?queue=exports&actor=export&job_id=job-1"
    assert set(out) == {"summary", "description", "runbook_url"}  # the runbook rides in no annotation


def test_default_description_and_one_line_summary() -> None:
    candidate, jobs = _context("x")
    rule = replace(candidate.rule, annotations={"summary": "Job {{ labels.job_id }}\n  stuck"})
    out = renderer().annotations(replace(candidate, rule=rule), jobs)
    assert out["summary"] == "Job job-1 stuck"
    assert out["description"] == "JobStuck holds with value 120.0 on queue exports for actor export (owner team-data)."


def test_runbook_base_url_is_a_real_url() -> None:
    assert RunbookRenderer(SHIPPED / "runbooks").runbook_url("ReliableJobStuck") == \
        "http://127.0.0.1:9464/runbooks/reliablejobstuck"  # the exporter's default address
    for bad in ("", "runbooks/", "/runbooks/", "ftp://x/", "https://wiki.example/rb"):
        with pytest.raises(ConfigError, match="runbook_base_url"):
            RunbookRenderer(SHIPPED / "runbooks", base_url=bad)


def test_the_test_would_catch_a_message_used_as_template() -> None:
    _candidate, _jobs = _context(EVIL)
    careless = EVIL[: EVIL.index("{{ ''")]
    unsafe = renderer().env.from_string(careless).render({})  # what a careless renderer would produce
    assert "49" in unsafe and "looploop" in unsafe


def test_runbook_names_attempts_checkpoint_links_and_action() -> None:
    candidate, jobs = _context("timeout talking to S3")
    text = renderer().runbook(candidate, jobs) or ""
    for part in ("## Meaning", "## Impact", "## Diagnosis", "## Mitigation", "`att-2`", "`att-1`",
                 "Last error class: transient", "timeout talking to S3", "{&#34;page&#34;: 7}",
                 "2027-01-15T08:00:00Z", "owner team-data",
                 "https://logs.example/?q=job-1&t=tr%201%26x", "https://traces.example/trace/tr%201%26x",
                 "`reliable stop job-1 --reason alert:JobStuck`", "`reliable jobs show job-1`"):
        assert part in text, part


def test_every_shipped_runbook_renders_without_jobs() -> None:
    r = renderer()
    for path in sorted((SHIPPED / "runbooks").glob("[!_]*.md.j2")):
        candidate, _ = _context("x")
        candidate = Candidate(_rule(path.name), candidate.labels, 1.0)
        text = r.runbook(candidate, []) or ""
        assert "template error" not in text, text
        assert "## Mitigation" in text and "reliable jobs list --queue exports --actor export" in text, path


def test_sandbox_blocks_unsafe_template_code(tmp_path: Path) -> None:
    (tmp_path / "evil.md.j2").write_text("{{ jobs.__class__.__mro__[1].__subclasses__() }}")
    r = RunbookRenderer(tmp_path)
    candidate, jobs = _context("x")
    text = r.runbook(Candidate(_rule("evil.md.j2"), candidate.labels, 1.0), jobs) or ""
    assert text.startswith("(template error: SecurityError") and "subclasses" not in text.replace("__subclasses__", "")


def test_check_reports_missing_and_broken_runbooks(tmp_path: Path) -> None:
    (tmp_path / "broken.md.j2").write_text("line one\n{% if %}\n")
    r = RunbookRenderer(tmp_path)
    with pytest.raises(PolicyError, match=r"inline.yaml:2: runbook template 'job_stuck.md.j2' not found"):
        r.check(_rule())
    with pytest.raises(PolicyError, match=r"broken.md.j2:2: runbook syntax error"):
        r.check(_rule("broken.md.j2"))


def test_links_are_percent_encoded_and_checked() -> None:
    assert safe_url("https://l/?q={job_id}", {"job_id": "a b/<c>"}) == "https://l/?q=a%20b%2F%3Cc%3E"
    assert safe_url("https://l/{trace_id}", {}) == "https://l/"
    with pytest.raises(ConfigError, match="unknown placeholder"):
        RunbookRenderer(SHIPPED / "runbooks", links={"logs": "https://l/{job_id.__class__}"})
    with pytest.raises(ConfigError, match="http"):
        RunbookRenderer(SHIPPED / "runbooks", links={"logs": "javascript:alert(1)"})


def test_next_actions_are_quoted_commands() -> None:
    dead = next_actions("DEAD", "j1", "DeadLetterGrowth")
    assert dead[-1] == "reliable dlq requeue j1 --reason alert:DeadLetterGrowth"
    assert next_actions("PAUSED", "j1", "JobStuck")[-1] == "reliable resume j1 --reason alert:JobStuck"
    assert next_actions("RUNNING", "j; rm -rf /", "X")[0] == "reliable jobs show 'j; rm -rf /'"
