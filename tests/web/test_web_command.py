"""`reliable web` as a real process: it serves the API and the console, and refuses bad set-ups."""

from __future__ import annotations

import subprocess
import sys

import httpx
from click.testing import CliRunner

from reliable.access import ApiTokens
from reliable.cli.main import cli
from reliable.store import StateStore

from support import CLI, free_port, stop_process, wait_for
from web_support import bearer


def test_reliable_web_serves_the_api_and_the_console(store: StateStore, store_url: str) -> None:
    _, token = ApiTokens(store).create("ada", "admin")
    port = free_port()
    process = subprocess.Popen([sys.executable, "-c", CLI, "web", "--port", str(port), "--store", store_url,
                                "--redact", "iban"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def serving() -> httpx.Response | None:
        assert process.poll() is None, process.communicate()[0].decode()
        try:
            return httpx.get(f"{base}/api/v1/whoami", headers=bearer(token), timeout=2)
        except httpx.TransportError:
            return None

    try:
        response = wait_for(serving, "reliable web to serve", timeout=30)
        assert response.status_code == 200 and response.json()["name"] == "ada"
        assert httpx.get(f"{base}/api/v1/whoami", timeout=2).status_code == 401
        login = httpx.get(f"{base}/login", timeout=2)
        assert login.status_code == 200 and "API token" in login.text
        assert httpx.get(f"{base}/static/console.css", timeout=2).status_code == 200
    finally:
        stop_process(process)


def test_a_proxy_header_needs_an_operators_file(store_url: str) -> None:
    result = CliRunner().invoke(cli, ["web", "--store", store_url, "--proxy-header", "X-Forwarded-User"])
    assert result.exit_code != 0 and "--proxy-header needs --operators-file" in result.output
