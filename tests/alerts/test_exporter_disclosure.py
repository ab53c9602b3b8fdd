"""`reliable exporter` (issue 25, item 2): it listens on this host only unless told otherwise, and its
runbook pages, which nobody authenticates to, show the dead-lettered jobs' details masked. The same
rendering goes to Alertmanager as annotations (`reliable alerts test --json` shows what is sent)."""

from __future__ import annotations

import json
import socket

import httpx
import pytest
from click.testing import CliRunner

from reliable.cli.main import cli
from reliable.exporter import PATHS
from reliable.redact import MASK
from reliable.states import Event
from reliable.store import ErrorInfo, NewJob, StateStore

from support import exporter

SECRET = "tok-live-8c1f"


def _dead_with_secrets(store_url: str) -> None:
    store = StateStore(store_url)
    try:
        store.register(NewJob(job_id="dead-1", queue="mail", actor="send", message={"kwargs": {"api_key": SECRET}},
                              owner="team-mail"))
        claim = store.claim("dead-1", worker_id="w", lease_ttl=60)
        store.save_checkpoint("dead-1", claim.lease_id, {"api_token": SECRET, "sent": 40}, lease_ttl=60)
        store.finish("dead-1", claim.lease_id, Event.DEAD_LETTER, worker_id="w",
                     error=ErrorInfo("transient", "ConnectionError", f"refused, authorization: Bearer {SECRET}"))
    finally:
        store.close()


#: Every path the exporter serves (`reliable.exporter.PATHS`) and the page of it that is requested.
EXPORTER_SURFACES = {"/": "/", "/healthz": "/healthz", "/metrics": "/metrics",
                     "/runbooks/": "/runbooks/reliabledeadlettergrowth"}


def test_runbook_pages_and_annotations_show_dead_jobs_masked(store_url: str) -> None:
    assert set(EXPORTER_SURFACES) == set(PATHS), "an exporter path without a disclosure rule (docs/redaction.md)"
    _dead_with_secrets(store_url)
    with exporter(store_url) as base:
        answers = {path: httpx.get(f"{base}{page}", timeout=30) for path, page in EXPORTER_SURFACES.items()}
    for path, answer in answers.items():
        assert answer.status_code == 200 and SECRET not in answer.text, (path, answer.text)
    page, metrics = answers["/runbooks/"], answers["/metrics"]
    assert page.status_code == 200 and "Job <code>dead-1</code>: DEAD" in page.text, page.text
    assert SECRET not in page.text and MASK in page.text, page.text
    assert metrics.status_code == 200 and 'reliable_jobs{' in metrics.text  # /metrics as before
    sent = CliRunner().invoke(cli, ["alerts", "test", "--store", store_url, "--json"])
    assert sent.exit_code == 0, sent.output
    (alert,) = [a for a in json.loads(sent.output)["alerts"] if a["alertname"] == "ReliableDeadLetterGrowth"]
    assert "dead-1" in alert["runbook"] and SECRET not in sent.output


def _outward_address() -> str | None:
    """This machine's address on its default route (no packet is sent), or None without one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("10.255.255.255", 1))
            address = str(sock.getsockname()[0])
        except OSError:
            return None
    return None if address.startswith("127.") else address


def _reachable(url: str) -> bool:
    try:
        httpx.get(url, timeout=5)
    except httpx.TransportError:
        return False
    return True


def test_the_exporter_listens_on_this_host_only_unless_told(sqlite_url: str) -> None:
    help_text = " ".join(CliRunner().invoke(cli, ["exporter", "--help"]).output.split())
    assert "RELIABLE_EXPORTER_HOST; default: 127.0.0.1" in help_text, help_text
    # 127.0.0.2 is loopback too, but not 127.0.0.1: only where the variable says.
    with exporter(sqlite_url, host=None, connect="127.0.0.2", env={"RELIABLE_EXPORTER_HOST": "127.0.0.2"}) as base:
        assert not _reachable(base.replace("127.0.0.2", "127.0.0.1") + "/healthz")
    outward = _outward_address()
    if outward is None:
        pytest.skip("no non-loopback address on this machine to check the default against")
    with exporter(sqlite_url, host=None) as base:
        assert not _reachable(base.replace("127.0.0.1", outward) + "/healthz")
    with exporter(sqlite_url, host=None, env={"RELIABLE_EXPORTER_HOST": "0.0.0.0"}) as base:
        assert _reachable(base.replace("127.0.0.1", outward) + "/healthz")
