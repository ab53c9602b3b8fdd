"""The documentation in the console, in a real browser (headless Chromium): pages are HTML, a link to
another topic opens that topic at its section, and every link of every page to another page or a
picture answers. A screenshot for docs/console.md."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from reliable.defaults import topics

from browser_support import Rig

pytestmark = pytest.mark.integration

try:
    from playwright.sync_api import expect
except ImportError:  # the browser fixture skips (or fails under CI) with the reason
    expect = None


def test_docs_render_as_html_and_links_between_topics_work(page: Any, rig: Rig) -> None:
    assert expect is not None
    page.goto("/docs/index")
    expect(page.locator("article.doc h1")).to_have_text("reliable documentation")
    expect(page.locator("article.doc table")).to_have_count(1)
    page.locator("article.doc a", has_text="concepts.md").first.click()
    page.wait_for_url(f"{rig.base}/docs/concepts")
    expect(page.locator("article.doc h1")).to_have_text("Concepts")
    expect(page.locator("article.doc pre code").first).to_be_visible()  # a fenced block, not Markdown text
    # A link with an anchor lands on a heading that has that id.
    page.goto("/docs/compatibility")
    link = page.locator('article.doc a[href*="/docs/concepts#"]').first
    anchor = urlsplit(link.get_attribute("href")).fragment
    link.click()
    page.wait_for_url(f"{rig.base}/docs/concepts#{anchor}")
    expect(page.locator(f"article.doc [id='{anchor}']")).to_have_count(1)
    rig.screenshot(page, "docs")
    # Every page's links to pages and pictures answer (the browser's own requests, with its session).
    for topic in topics.topics():
        page.goto(f"/docs/{topic.name}")
        hrefs = page.eval_on_selector_all("article.doc a[href], article.doc img",
                                          "els => els.map(e => e.href || e.src)")
        for href in {h.split("#")[0] for h in hrefs if h.startswith(rig.base)}:
            assert page.request.get(href).status == 200, f"{topic.name} links to {href}"
    assert "**" not in page.locator("article.doc").inner_text()  # emphasis rendered, not shown raw
