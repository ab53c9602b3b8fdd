"""A runbook's Markdown as HTML (reliable.alerts.runbook_html) and the labels its link carries
(reliable.alerts.runbooks.runbook_url)."""

from __future__ import annotations

from urllib.parse import quote

from reliable.alerts.runbook_html import runbook_html, runbook_page
from reliable.alerts.runbooks import runbook_url, runbook_url_template


def test_the_runbooks_markdown_becomes_tags_and_everything_else_text() -> None:
    markdown = ("# Title (x)\n\nA paragraph\ncontinued with `code &amp; more`.\n\n## Part\n"
                "- Job `j1`: DEAD\n  - Last error: can&#39;t &lt;script&gt;alert(1)&lt;/script&gt;\n\n"
                "  - Link: https://trace.example/t?id=1&amp;x=2\n- second\n\nRunbook: http://h/rb/x?a=1&amp;b=2\n")
    html = str(runbook_html(markdown))
    assert html.startswith("<h2>Title (x)</h2>\n<p>A paragraph continued with <code>code &amp; more</code>.</p>")
    assert "<h3>Part</h3>\n<ul>\n<li>Job <code>j1</code>: DEAD\n<ul>\n<li>Last error: can&#39;t " \
           "&lt;script&gt;alert(1)&lt;/script&gt;</li>" in html
    assert '<li>Link: <a href="https://trace.example/t?id=1&amp;x=2" rel="noreferrer">' in html
    assert "</ul></li>\n<li>second</li>\n</ul>" in html
    assert '<p>Runbook: <a href="http://h/rb/x?a=1&amp;b=2" rel="noreferrer">http://h/rb/x?a=1&amp;b=2</a></p>' in html
    assert "<script" not in html and "&amp;#39;" not in html and "&amp;amp;" not in html


def test_job_ids_link_to_their_pages_when_a_job_url_is_given() -> None:
    markdown = "- Job `a/b\"<x>`: DEAD\n- Recent attempt ids: `att-1`\n"

    def job_url(job_id: str) -> str:
        return f"https://console.example/jobs/{quote(job_id, safe='')}"

    html = str(runbook_html(markdown, job_url=job_url))
    assert '<li>Job <a href="https://console.example/jobs/a%2Fb%22%3Cx%3E"><code>a/b&#34;&lt;x&gt;</code></a>: DEAD' \
        in html, html
    assert "<code>att-1</code>" in html and "jobs/att-1" not in html  # only the job id links
    assert "<a " not in str(runbook_html(markdown))  # no console known: no link
    page = runbook_page("reliablejobstuck", markdown, job_url=job_url)
    assert page.startswith("<!doctype html>") and "<title>Runbook reliablejobstuck</title>" in page
    assert "console.example/jobs/" in page


def test_a_link_cannot_break_out_of_its_attribute() -> None:
    html = str(runbook_html('see http://x.example/"onmouseover=alert(1) and http://y.example/<b>'))
    assert '"onmouseover' not in html and "<b>" not in html


def test_runbook_url_carries_the_alerts_labels() -> None:
    labels = {"alertname": "ReliableDeadLetterGrowth", "actor": "send mail", "queue": "mail", "owner": "x"}
    assert runbook_url("http://h/runbooks/", "ReliableDeadLetterGrowth", labels) == \
        "http://h/runbooks/reliabledeadlettergrowth?queue=mail&actor=send+mail"
    assert runbook_url("https://wiki/?page=", "Stuck", {"job_id": "j/1"}) == "https://wiki/?page=stuck&job_id=j%2F1"
    assert runbook_url("https://wiki/rb#", "Stuck", {"job_id": "j1"}) == "https://wiki/rb#stuck"  # no query after a #
    assert runbook_url("http://h/runbooks/", "Stuck") == "http://h/runbooks/stuck"


def test_a_prometheus_runbook_url_after_a_fragment_base_carries_no_query() -> None:
    assert runbook_url_template("https://wiki.example/rb#", "ReliableDeadLetters") == \
        "https://wiki.example/rb#reliabledeadletters"
    assert runbook_url_template("https://wiki.example/rb?page=", "X").startswith(
        'https://wiki.example/rb?page=x{{ $sep := "&" }}')
