"""Helpers for the observability tests: free ports, a `reliable exporter` subprocess, scraping."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence

import httpx
from prometheus_client.parser import text_string_to_metric_families

CLI = "from reliable.cli.main import main; main()"


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def exporter(store_url: str, *args: str, env: Mapping[str, str] | None = None,
             startup: float = 30.0) -> Iterator[str]:
    """Run `reliable exporter` as a real subprocess on a free port; yield its base URL; stop it."""
    port = free_port()
    command: Sequence[str] = [sys.executable, "-c", CLI, "exporter", "--host", "127.0.0.1", "--port", str(port),
                              "--store", store_url, *args]
    child_env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    child_env.update(env or {})
    process = subprocess.Popen(command, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup
        while True:
            if process.poll() is not None:
                out, err = process.communicate()
                raise AssertionError(f"exporter exited with {process.returncode}: {err.decode()}{out.decode()}")
            try:
                httpx.get(f"{base}/", timeout=1.0)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise AssertionError("exporter did not start listening") from None
                time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        for pipe in (process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """GET /metrics and parse it: {(sample name, sorted labels): value}."""
    response = httpx.get(f"{base}/metrics", timeout=30.0)
    assert response.status_code == 200, response.text
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def sample(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str,
           **labels: str) -> float | None:
    """One sample's value, or None when absent."""
    return samples.get((name, tuple(sorted(labels.items()))))


def families(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float]) -> set[str]:
    """The sample names present."""
    return {name for name, _ in samples}
