"""reliable.web.doc_html: the docs' Markdown as escaped HTML, links mapped by the caller."""

from __future__ import annotations

from reliable.web.doc_html import doc_html, slug


def to(target: str) -> str | None:
    return None if target.startswith("../") else f"/d/{target}"


def test_blocks_and_inline_forms_become_tags_and_everything_else_is_escaped() -> None:
    page = doc_html(
        "# The `reliable` page\n\nText with **bold**, *emphasis*, `a|b` and <script>x</script>.\n\n"
        "- one\n  - nested [worker](worker.md#metrics) and after\n- two\n\n1. first\n2. second\n\n"
        "| name | what |\n|---|---|\n| `a \\| b` | [x](../out.py) |\n\n```python\nif a < b:\n    pass\n```\n"
        "![shot](images/x.png)\n", to)
    assert '<h1 id="the-reliable-page">The <code>reliable</code> page</h1>' in page
    assert "<strong>bold</strong>" in page and "<em>emphasis</em>" in page and "<code>a|b</code>" in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script>" not in page
    assert '<ul>\n<li>one\n<ul>\n<li>nested <a href="/d/worker.md#metrics">worker</a> and after' in page
    assert "<li>two\n</li></ul>\n<ol>\n<li>first\n</li>\n<li>second\n</li></ol>" in page
    assert "<td><code>a | b</code></td><td>x</td>" in page  # a target the caller does not serve: text only
    assert '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>' in page
    assert '<img src="/d/images/x.png" alt="shot">' in page


def test_slugs_are_githubs() -> None:
    assert slug("RabbitMQ acks, `consumer_timeout` and long jobs") == "rabbitmq-acks-consumer_timeout-and-long-jobs"
    assert slug("What changes for an existing Dramatiq app") == "what-changes-for-an-existing-dramatiq-app"
