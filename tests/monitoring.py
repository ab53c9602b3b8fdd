"""Real Prometheus and Alertmanager processes for tests (Debian packages prometheus and
prometheus-alertmanager), each on free ports in a temporary directory, and a webhook receiver
that records what Alertmanager notifies. Each waits for readiness; none sleeps.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml

from support import free_port, require_service, wait_for

AM_BINARY = "/usr/bin/prometheus-alertmanager"
PROMETHEUS_BINARY = "/usr/bin/prometheus"


class _Process:
    """A server process on 127.0.0.1:port, ready once GET /-/ready answers 200."""

    name = "server"

    def __init__(self, tmp: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = tmp
        self.log = tmp / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> None:
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL, stderr=self.log.open("ab"))
        wait_for(self._ready, f"{self.name} to be ready", timeout=30)

    def _ready(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited: {self.log.read_text()[-2000:]}")
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


class Alertmanager(_Process):
    """A real Alertmanager (clustering off) with the config file `config` (default: the shipped example)."""

    name = "alertmanager"

    def __init__(self, tmp: Path, config: Path | None = None) -> None:
        super().__init__(tmp)
        self.config = config or shipped_alertmanager_config()

    def command(self) -> list[str]:
        return [AM_BINARY, f"--config.file={self.config}", f"--storage.path={self.tmp / 'am-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--cluster.listen-address="]

    def alerts(self, alertname: str | None = None) -> list[dict[str, Any]]:
        params = {"filter": f'alertname="{alertname}"'} if alertname else {}
        response = httpx.get(f"{self.url}/api/v2/alerts", params=params, timeout=5)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()
        return result


class Prometheus(_Process):
    """A real Prometheus scraping `targets` every second and evaluating `rules` (a rule file) every
    second, sending its alerts to `alertmanager` at once (resend delay 1 s)."""

    name = "prometheus"

    def __init__(self, tmp: Path, *, rules: Path, targets: list[str], alertmanager: str) -> None:
        super().__init__(tmp)
        self.config = tmp / "prometheus.yml"
        self.config.write_text(yaml.safe_dump({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager.removeprefix("http://")]}]}]},
            "scrape_configs": [{"job_name": "reliable", "static_configs": [{"targets": targets}]}],
        }))

    def command(self) -> list[str]:
        return [PROMETHEUS_BINARY, f"--config.file={self.config}", f"--storage.tsdb.path={self.tmp / 'prom-data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--rules.alert.resend-delay=1s"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector `expr` evaluates to now."""
        response = httpx.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=5)
        response.raise_for_status()
        result: list[dict[str, Any]] = response.json()["data"]["result"]
        return result

    def firing(self) -> list[dict[str, Any]]:
        response = httpx.get(f"{self.url}/api/v1/alerts", timeout=5)
        response.raise_for_status()
        return [a for a in response.json()["data"]["alerts"] if a["state"] == "firing"]


class Webhooks:
    """An HTTP server recording every POST body (Alertmanager's webhook notifications) with its path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, Any]]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.path.strip("/"), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                """No access log."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Webhooks:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def notifications(self) -> list[tuple[str, str, str]]:
        """(receiver path, alertname, status) of each alert of each notification, in arrival order."""
        return [(path, alert["labels"].get("alertname", ""), alert["status"])
                for path, body in list(self.received) for alert in body["alerts"]]


def shipped_alertmanager_config() -> Path:
    """The Alertmanager example the wheel ships (reliable/defaults/alertmanager/alertmanager.yml)."""
    return Path(__file__).resolve().parents[1] / "reliable" / "defaults" / "alertmanager" / "alertmanager.yml"


def fast_alertmanager_config(tmp: Path, webhooks: str, *, wait: str = "1s") -> Path:
    """The shipped example, its routing tree and inhibitions as shipped, with its receivers' URLs on
    `webhooks` (same paths) and its waits cut to `wait` (a test cannot wait 5 minutes; an inhibition
    holds only if its source arrived before the target's group flushes: a test of one needs a wait
    longer than the skew between two alerts of one evaluation on a loaded machine)."""
    doc = yaml.safe_load(shipped_alertmanager_config().read_text())

    def fast(route: dict[str, Any]) -> None:
        for key in ("group_wait", "group_interval"):
            if key in route or route is doc["route"]:
                route[key] = wait
        route["repeat_interval"] = "1h"
        for child in route.get("routes", ()):
            fast(child)

    fast(doc["route"])
    for receiver in doc["receivers"]:
        for hook in receiver.get("webhook_configs", ()):
            hook["url"] = hook["url"].replace("http://127.0.0.1:5001", webhooks)
    path = tmp / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def require_monitoring() -> None:
    """Skip (locally) or fail (CI) without the Prometheus and Alertmanager binaries."""
    require_service("Alertmanager (Debian package prometheus-alertmanager)", shutil.which(AM_BINARY) is not None)
    require_service("Prometheus (Debian package prometheus)", shutil.which(PROMETHEUS_BINARY) is not None)


@contextmanager
def running(*processes: _Process) -> Iterator[None]:
    """Start `processes` in order; stop them all (in reverse) however the block ends."""
    started: list[_Process] = []
    try:
        for process in processes:
            process.start()
            started.append(process)
        yield
    finally:
        for process in reversed(started):
            process.stop()
