"""reliable in a Django project that uses django-dramatiq, installed as docs/integrations.md says."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("django_dramatiq", reason="django-dramatiq is in the dev extra")

SITE = Path(__file__).with_name("django_site")


def test_reliable_installed_in_ready_tracks_django_dramatiq_jobs(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'reliable.db'}"
    import reliable

    reliable.StateStore(store).upgrade()
    env = {**os.environ, "RELIABLE_STORE": store, "DJANGO_DB": str(tmp_path / "django.db")}
    done = subprocess.run([sys.executable, str(SITE / "run.py")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ReliableMiddleware" in report["middleware"]
    assert "AdminMiddleware" in report["middleware"]  # django-dramatiq's own middleware stays in place
    assert report["jobs"] == {"add": "SUCCEEDED", "reject": "FAILED"}
    assert report["admin_tasks"] == ["done", "failed"]  # django-dramatiq's admin sees the same outcomes
