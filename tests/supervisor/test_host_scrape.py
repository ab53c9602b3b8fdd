"""One scrape target per host (issue 29, item 1): `reliable worker` and `reliable exporter` on their
defaults, a job that succeeds and one that goes DEAD; the exporter's /metrics has every series the
shipped PromQL rules use, and promtool, fed the scraped series, fires the dead-letter alert.

Neither process is told where the workers' metrics are (PROMETHEUS_MULTIPROC_DIR unset): they meet
in the per-user default directory.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from reliable.alerts import export_yaml, load_rules
from reliable.multiprocess import ENV

from supervised import Supervised
from support import CLI, Samples, free_port, require_service, scrape, wait_for
from workers import send

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
SERIES = re.compile(r"\b(reliable_[a-z_]+)\b")
#: Gauges with nothing to report here, absent by design: absent, their rules have nothing to alert on.
ABSENT_WHEN_NOTHING = {
    "reliable_concurrency_limit": "only actors with a concurrency limit (reliable.limits) have one",
    "reliable_concurrency_limit_declared": "ditto",
    "reliable_oldest_pending_timestamp_seconds": "a queue with no due PENDING job has no oldest one",
}


def _promql_rules() -> list[Any]:
    return [rule for rule in load_rules(ROOT / "alert_rules") if rule.kind == "promql"]


def used_series() -> set[str]:
    """The reliable_* series the shipped PromQL rules read."""
    exported = yaml.safe_load(export_yaml(_promql_rules()))
    return {name for group in exported["groups"] for rule in group["rules"] for name in SERIES.findall(rule["expr"])}


def present(samples: Samples, name: str) -> bool:
    return any(sample == name for sample, _ in samples)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sum of the samples called `name` that carry `labels` (None: no such sample)."""
    found = [v for (sample, tags), v in samples.items() if sample == name and labels.items() <= dict(tags).items()]
    return sum(found) if found else None


@pytest.fixture
def exporter(worker_env: dict[str, str], tmp_path: Path) -> Iterator[str]:
    """`reliable exporter` on its defaults (no --multiprocess-dir, no variable); its base URL."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != ENV}
    log = (tmp_path / "exporter.log").open("ab")
    proc = subprocess.Popen([sys.executable, "-c", CLI, "exporter", "--host", "127.0.0.1", "--port", str(port),
                             "--store", worker_env["RELIABLE_TEST_STORE"]], env=env, stdout=log, stderr=log)
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(healthy, "the exporter answering", timeout=30,
                 context=lambda: (tmp_path / "exporter.log").read_text(errors="replace"))
        yield base
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def test_one_scrape_has_every_series_the_rules_use_and_the_dead_letter_alert_fires(
        producer: Any, worker_env: dict[str, str], queue_name: str, exporter: str,
        supervise: Callable[..., Supervised], tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    require_service("promtool (Debian package `prometheus`)", promtool is not None)
    assert promtool is not None
    broker, store = producer
    sup = supervise({**worker_env, ENV: ""}, "-p", "2", "-t", "1", "-Q", queue_name, app="scrape_app")
    sup.wait_ready(2)

    # Known actors' labelled counters are there at 0 before their first event.
    def dead_letters(count: int) -> Samples | None:
        samples = scrape(exporter)
        return samples if value(samples, "reliable_dead_letters_total", actor="doomed", queue=queue_name) == count \
            else None

    before = wait_for(lambda: dead_letters(0), "the workers' counters at 0 on the exporter", timeout=30,
                      context=sup.output)
    fine, doomed = send(broker, queue_name, "fine"), send(broker, queue_name, "doomed")
    wait_for(lambda: store.get(doomed.message_id).status.value == "DEAD"
             and store.get(fine.message_id).status.value == "SUCCEEDED", "one job DEAD, one SUCCEEDED",
             timeout=60, context=sup.output)
    after = wait_for(lambda: dead_letters(1), "the dead letter counted on the exporter", timeout=30,
                     context=sup.output)

    # Every series the shipped rules read is on the one target (supervisor's and children's included).
    missing = sorted(name for name in used_series() - ABSENT_WHEN_NOTHING.keys() if not present(after, name))
    assert not missing, f"the exporter lacks {missing}"
    assert value(after, "reliable_attempts_total", actor="doomed", queue=queue_name) == 1
    assert value(after, "reliable_transitions_total", event="succeed", actor="fine", queue=queue_name) == 1
    assert value(after, "reliable_worker_restarts_total", reason="crash") is not None

    # promtool: the scraped dead-letter counter, before then after, as an input series.
    rules = tmp_path / "rules.yml"
    rules.write_text(export_yaml(_promql_rules()))
    name, labels = "reliable_dead_letters_total", {"actor": "doomed", "queue": queue_name}
    series = name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
    was, now = value(before, name, **labels), value(after, name, **labels)
    test = {"rule_files": [rules.name], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [{"series": series, "values": f"{was:g} {now:g}x20"}],
        "promql_expr_test": [{"expr": 'ALERTS{alertname="ReliableDeadLetters",alertstate="firing"}',
                              "eval_time": "5m",
                              "exp_samples": [{"labels": 'ALERTS{alertname="ReliableDeadLetters",alertstate="firing",'
                                                         f'actor="doomed",queue="{queue_name}",owner="platform",'
                                                         'route="notify",severity="warning"}', "value": 1}]}],
    }]}
    (tmp_path / "scrape_test.yml").write_text(yaml.safe_dump(test))
    done = subprocess.run([promtool, "test", "rules", "scrape_test.yml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
