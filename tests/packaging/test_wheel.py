"""The pip user's first hour, for real: the wheel built from this checkout, installed in a fresh
virtual environment outside it, adopted into a small app with the README's two lines, a real
`dramatiq` worker on RabbitMQ, and the operational files (`reliable init`, the shipped alert rules
checked by promtool) used from the installed package only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from doc_paths import problems

from support import Samples, exporter, promtool_fires, require_service, sample_value, scrape, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SHIPPED = {"policies/builtin/default.yaml", "policies/examples/http_api.yaml", "policies/operators/operators.yaml",
           "alert_rules/store.yaml", "alert_rules/prometheus.yaml", "runbooks/_layout.md.j2",
           "runbooks/job_stuck.md.j2", "grafana/reliable-dashboard.json", "alertmanager/alertmanager.yml",
           "alertmanager/reliable-alerts.yaml"}

APP = '''\
import dramatiq
from dramatiq.brokers.rabbitmq import RabbitmqBroker
import reliable

broker = RabbitmqBroker(url={rabbitmq!r})
reliable.install(broker, store={store!r}, policies="policies/")
dramatiq.set_broker(broker)


@dramatiq.actor(queue_name={queue!r})
def add(a: int, b: int) -> int:
    return a + b


@dramatiq.actor(queue_name={queue!r}, max_attempts=1)
def doomed() -> None:
    raise ConnectionError("the partner is down")
'''


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of this checkout (pip builds it in an isolated environment, as a user's pip would).

    Built from a copy of the sources, so that the build sees only what the sdist would hold (and two
    xdist workers building at once do not trip over each other's files)."""
    out = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    for tree in ("reliable", "policies", "alert_rules", "runbooks", "docs", "examples"):  # the last five: built in
        shutil.copytree(REPO / tree, source / tree, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
                   check=True, timeout=600, capture_output=True)
    (found,) = out.glob("reliable-*.whl")
    return found


def test_the_wheel_ships_the_operational_files_and_the_license(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = {name for name in SHIPPED if f"reliable/defaults/{name}" not in names}
    assert not missing, f"the wheel lacks {sorted(missing)}"
    # The docs, built in from the top-level docs/ (one copy in the tree).
    docs = {f"reliable/defaults/docs/{p.name}" for p in (REPO / "docs").glob("*.md")}
    assert docs and not docs - names, f"the wheel lacks {sorted(docs - names)}"
    assert "reliable/defaults/policies/app.yaml" in names
    # The console's pages and static files, and the migration that creates its tables.
    web_files = {str(p.relative_to(REPO)) for p in (REPO / "reliable" / "web").rglob("*") if p.is_file()
                 and p.parent.name != "web"
                 and "__pycache__" not in p.parts}
    assert web_files and not web_files - names, f"the wheel lacks {sorted(web_files - names)}"
    assert "reliable/store/migrations/versions/0009_console.py" in names
    assert "Provides-Extra: web" in zipfile.ZipFile(wheel).read(
        next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata
    import reliable

    assert f"Version: {reliable.__version__}\n" in metadata  # one version source: reliable.__version__


def test_no_shipped_page_names_a_file_the_wheel_lacks(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    found = problems(names, sorted((REPO / "docs").glob("*.md")))
    assert not found, "\n".join(found)
    assert "reliable/defaults/examples/README.md" in names  # index.md names the examples


#: The environment of the installed package's commands: nothing of this checkout's.
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RELIABLE_STORE",
                                                        "PROMETHEUS_MULTIPROC_DIR")}


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment outside the checkout with the wheel installed."""
    venv = tmp_path_factory.mktemp("installed") / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], venv.parent, ENV)
    _run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
         venv.parent, ENV, timeout=900)
    where = _run([str(venv / "bin" / "python"), "-c", "import reliable; print(reliable.__file__)"], venv.parent,
                 ENV).strip()
    assert where.startswith(str(venv)), f"imported {where}, not the installed wheel"
    return venv


def test_a_fresh_install_adopts_an_app_runs_a_worker_and_exports_checked_rules(
        venv: Path, tmp_path: Path, rabbitmq_url: str, queue_name: str) -> None:
    promtool = shutil.which("promtool")
    require_service("promtool (Debian package `prometheus`)", promtool is not None)
    assert promtool is not None
    project = tmp_path / "project"
    project.mkdir()
    env = ENV
    python, reliable_cli, dramatiq_cli = (str(venv / "bin" / name) for name in ("python", "reliable", "dramatiq"))

    # The operational files come from the installed package: no checkout in sight.
    _run([reliable_cli, "init"], project, env)
    for name in SHIPPED:
        assert (project / name).is_file(), f"reliable init did not write {name}"
    assert "OK:" in _run([reliable_cli, "policy", "check", "policies/"], project, env)
    from reliable.alerts import load_rules  # the checkout's count of the rules the wheel ships

    shipped = len(load_rules(REPO / "alert_rules"))
    assert f"OK: {shipped} rules" in _run([reliable_cli, "alerts", "check", "alert_rules/", "--runbooks", "runbooks/"],
                                          project, env)
    rules = project / "reliable-rules.yaml"
    _run([reliable_cli, "alerts", "export-prometheus", "--out", str(rules)], project, env)  # the shipped rules
    _run([promtool, "check", "rules", str(rules)], project, env)

    # The README's two lines on a small app, a real worker, a job that succeeds.
    store = f"sqlite:///{project / 'app.db'}"
    (project / "app.py").write_text(APP.format(rabbitmq=rabbitmq_url, store=store, queue=queue_name))
    _run([reliable_cli, "db", "upgrade", "--store", store], project, env)
    enqueue = textwrap.dedent("""\
        import app
        print(app.add.send(2, 3).message_id)
    """)
    job_id = _run([python, "-c", enqueue], project, env).strip()
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen([dramatiq_cli, "app", "-p", "1", "-t", "2", "-Q", queue_name], cwd=project, env=env,
                              stdout=log, stderr=subprocess.STDOUT)
    try:
        def status() -> str | None:
            out = _run([reliable_cli, "jobs", "show", job_id, "--store", store, "--json"], project, env)
            found = json.loads(out)
            return found["job"]["status"] if found["job"]["status"] == "SUCCEEDED" else None

        wait_for(status, f"job {job_id} SUCCEEDED", timeout=120, interval=0.5,
                 context=lambda: (tmp_path / "worker.log").read_text(errors="replace"))
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        log.close()


def test_from_the_wheel_the_docs_and_the_dead_letter_alert_on_one_scrape(
        venv: Path, tmp_path: Path, rabbitmq_url: str, queue_name: str) -> None:
    """Issue 29: `reliable docs` from the installed package; `reliable worker` and `reliable exporter`
    on their defaults, a DEAD job, and promtool fires the shipped dead-letter alert on the scrape."""
    promtool = shutil.which("promtool")
    require_service("promtool (Debian package `prometheus`)", promtool is not None)
    assert promtool is not None
    reliable_cli, python = str(venv / "bin" / "reliable"), str(venv / "bin" / "python")
    project = tmp_path / "project"
    project.mkdir()

    topics = _run([reliable_cli, "docs"], project, ENV)
    assert "worker" in topics and "postgresql-failover" in topics
    page = _run([reliable_cli, "docs", "docs/observability.md"], project, ENV)
    assert page.startswith("# Observability") and "reliable-metrics-<uid>" in page
    assert str(venv) in _run([reliable_cli, "docs", "policies", "--path"], project, ENV)

    _run([reliable_cli, "init"], project, ENV)
    store = f"sqlite:///{project / 'app.db'}"
    (project / "app.py").write_text(APP.format(rabbitmq=rabbitmq_url, store=store, queue=queue_name))
    _run([reliable_cli, "db", "upgrade", "--store", store], project, ENV)
    rules = _run([reliable_cli, "alerts", "export-prometheus"], project, ENV)
    log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen([reliable_cli, "worker", "app", "-p", "1", "-t", "1", "-Q", queue_name], cwd=project,
                              env=ENV, stdout=log, stderr=subprocess.STDOUT)
    labels = {"actor": "doomed", "queue": queue_name}
    try:
        with exporter(store, cli=[reliable_cli], base_env=ENV) as base:
            def dead_letters(count: int) -> Samples | None:
                samples = scrape(base)
                return samples if sample_value(samples, "reliable_dead_letters_total", **labels) == count else None

            worker_log = lambda: (tmp_path / "worker.log").read_text(errors="replace")  # noqa: E731
            before = wait_for(lambda: dead_letters(0), "the worker's counters at 0 on the exporter", timeout=120,
                              interval=0.5, context=worker_log)
            _run([python, "-c", "import app; app.doomed.send()"], project, ENV)
            after = wait_for(lambda: dead_letters(1), "the dead letter on the exporter", timeout=120, interval=0.5,
                             context=worker_log)
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        log.close()
    # promtool, fed the scraped dead-letter transitions, fires the fast burn of the actor (owner "unowned":
    # no worker's owner series fed here).
    dead = {**labels, "event": "dead_letter", "to_state": "DEAD"}
    series = "reliable_transitions_total{" + ",".join(f'{k}="{v}"' for k, v in sorted(dead.items())) + "}"
    was, now = (sample_value(samples, "reliable_transitions_total", **dead) for samples in (before, after))
    assert (was, now) == (0, 1)
    promtool_fires(promtool, rules, tmp_path, series, was, now, "ReliableErrorBudgetBurnFast",
                   {"actor": labels["actor"], "owner": "unowned", "route": "page", "severity": "critical"})
