"""Fixtures of the browser tests: a private PostgreSQL store, a real Dramatiq worker on RabbitMQ, the
console served by uvicorn on a free port, and Debian's Chromium driven by Playwright.

Outside CI a missing browser, Playwright or service skips these tests with the reason; under
CI=true it fails them (support.require_service).
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pika
import pytest

import reliable
from reliable.access import ApiTokens
from reliable.store import StateStore
from reliable.web import WebConfig, create_app

from browser_actors import declare
from browser_support import CHROMIUM, TIMEOUT_MS, Rig
from support import RABBITMQ_URL, free_port, port_open, require_service, scratch_database, wait_for
from workers import WorkerProcess


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's headless Chromium under Playwright (its own browser download is not used)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    require_service("Playwright", sync_playwright is not None, problem="(the Python package) is not installed")
    require_service("Chromium", os.path.exists(CHROMIUM),
                    problem=f"is not installed at {CHROMIUM} (apt-get install chromium; scripts/test does it)")
    assert sync_playwright is not None
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A private database, a queue of this module's own with a worker on it, and the console over them."""
    import uvicorn
    from dramatiq.brokers.rabbitmq import RabbitmqBroker

    require_service("RabbitMQ", port_open("127.0.0.1", 5672))
    logs = tmp_path_factory.mktemp("console-browser")
    queue = f"console_{uuid.uuid4().hex[:8]}"
    with scratch_database("reliable_console_") as url, contextlib.ExitStack() as stack:
        migrated = StateStore(url)
        migrated.upgrade()
        migrated.close()
        producer = RabbitmqBroker(url=RABBITMQ_URL)
        stack.callback(producer.close)
        middleware = reliable.install(producer, store=url, recovery=False)
        stack.callback(middleware.store.close)
        stack.callback(_delete_queues, queue)
        actors = declare(producer, queue)
        worker = WorkerProcess({"RELIABLE_TEST_BROKER": RABBITMQ_URL, "RELIABLE_TEST_STORE": url,
                                "RELIABLE_TEST_QUEUE": queue}, logs / "worker.log", threads=4, app="console_worker",
                               app_dir=Path(__file__).parent)
        stack.callback(worker.stop)
        store = StateStore(url)
        stack.callback(store.close)
        _, token = ApiTokens(store).create("ada", "admin")
        app = create_app(store, broker=producer, config=WebConfig(secret_key="browser-tests", host="test-host",
                                                                   overview_ttl=0))  # figures as of now
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning",
                                               lifespan="off"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()

        def stop_server() -> None:
            server.should_exit = True
            thread.join(15)

        stack.callback(stop_server)
        wait_for(lambda: server.started or not thread.is_alive(), "uvicorn to serve", timeout=30)
        assert server.started, "uvicorn stopped before serving"
        yield Rig(f"http://127.0.0.1:{server.config.port}", store, actors, token, worker, logs)


def _delete_queues(queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(RABBITMQ_URL))
    try:
        channel = connection.channel()
        for suffix in ("", ".DQ", ".XQ"):
            channel.queue_delete(queue + suffix)
    finally:
        connection.close()


@pytest.fixture
def page(browser: Any, rig: Rig) -> Iterator[Any]:
    """A new browser page (its own cookies), signed in to the console as an admin. A test whose pages
    break the console's Content-Security-Policy (an inline script or style: Chromium refuses it and says
    so on the console) fails."""
    context = browser.new_context(viewport={"width": 1280, "height": 960}, base_url=rig.base)
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    refused: list[str] = []
    # A frame refused by frame-ancestors is the policy at work (the console frames nothing), not a break.
    tab.on("console", lambda message: refused.append(message.text) if "Content Security Policy" in message.text
           and "frame-ancestors" not in message.text else None)
    try:
        tab.goto("/login")
        tab.get_by_label("API token").fill(rig.admin_token)
        tab.get_by_role("button", name="Sign in").click()
        tab.wait_for_url(f"{rig.base}/")
        yield tab
        assert not refused, f"the page broke its Content-Security-Policy: {refused}"
    finally:
        context.close()
