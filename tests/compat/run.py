"""Run Dramatiq's own test suite with reliable installed on every broker it builds.

    python tests/compat/run.py [--store sqlite|postgresql|all] [--plain] [--source DIR] [-n N] [-- PYTEST ARGS]

The tests come from the sdist of the installed Dramatiq version, downloaded with pip and cached
(never copied into this repository); `shim/` supplies the conftest and helpers the sdist leaves out.
SQLite runs the whole suite; PostgreSQL runs the modules where the store does the most work
(composition, results, callbacks, worker, actors). `--plain` runs the same tests without reliable,
for the side-by-side counts. Expected differences are listed in expected_differences.yaml.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import uuid
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE = HERE / "site"
SHIM = HERE / "shim"
EXPECTED = HERE / "expected_differences.yaml"
CACHE = Path(os.environ.get("RELIABLE_COMPAT_CACHE", Path.home() / ".cache" / "reliable" / "compat"))
PG_ADMIN_URL = os.environ.get("RELIABLE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
POSTGRESQL_MODULES = ("test_composition.py", "test_results.py", "test_callbacks.py", "test_worker.py",
                      "test_actors.py")


def sdist(version: str) -> Path:
    """The cached sdist of Dramatiq `version`, downloaded by pip on first use."""
    archive = CACHE / f"dramatiq-{version}.tar.gz"
    if archive.exists():
        return archive
    CACHE.mkdir(parents=True, exist_ok=True)
    download = CACHE / f"download-{uuid.uuid4().hex[:8]}"
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    "--dest", str(download), f"dramatiq=={version}"], check=True)
    found = list(download.glob("dramatiq-*.tar.gz"))
    if len(found) != 1:
        raise SystemExit(f"pip download of dramatiq=={version} gave {[p.name for p in found]}, not one sdist")
    found[0].replace(archive)
    shutil.rmtree(download, ignore_errors=True)
    return archive


def test_tree(archive: Path, version: str) -> Path:
    """A directory holding `tests/`: the sdist's test modules plus our shim; rebuilt from the archive."""
    work = CACHE / f"work-{version}"
    shutil.rmtree(work, ignore_errors=True)
    (work / "tests").mkdir(parents=True)
    prefix = f"dramatiq-{version}/tests/"
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        if not members:
            raise SystemExit(f"{archive} has no tests/ directory")
        for member in members:
            member.name = "tests/" + member.name[len(prefix):]
            tar.extract(member, work, filter="data")
    return work


def source_tree(source: Path) -> Path:
    """Use a Dramatiq checkout's tests/ (for modules the sdist does not ship) with our shim."""
    if not (source / "tests").is_dir():
        raise SystemExit(f"--source {source}: no tests/ directory there")
    work = CACHE / "work-source"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(source / "tests", work / "tests", ignore=shutil.ignore_patterns("conftest.py", "common.py"))
    return work


def add_shim(work: Path) -> None:
    for name in ("__init__.py", "conftest.py", "common.py"):
        shutil.copyfile(SHIM / name, work / "tests" / name)
    (work / "pytest.ini").write_text("[pytest]\ntestpaths = tests\ntimeout = 300\n")


def pg_template() -> str:
    """A migrated PostgreSQL database the per-test stores are copied from; its name."""
    from sqlalchemy import create_engine, text

    from reliable.store import StateStore

    name = f"reliable_compat_tmpl_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    store = StateStore(PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}")
    store.upgrade()
    store.close()
    return name


def drop_database(name: str) -> None:
    from sqlalchemy import create_engine, text

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def run(work: Path, store: str | None, modules: tuple[str, ...], workers: int, extra: list[str]) -> int:
    """One pytest run of the test tree; its exit code (no tests collected is a failure)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SITE), env.get("PYTHONPATH")]))
    env["RELIABLE_COMPAT_EXPECTED"] = str(EXPECTED)
    # Dramatiq's CLI re-executes `python` from PATH on SIGHUP: it must be this interpreter.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("RELIABLE_COMPAT_STORE", None)
    template = None
    if store is not None:
        env["RELIABLE_COMPAT_STORE"] = store
    if store == "postgresql":
        template = pg_template()
        env["RELIABLE_COMPAT_PG_TEMPLATE"] = template
        env["RELIABLE_COMPAT_PG_ADMIN"] = PG_ADMIN_URL
    chosen = [arg for arg in extra if arg.startswith("tests/")]
    targets = [] if chosen else [f"tests/{m}" for m in modules] or ["tests"]
    parallel = ["-n", str(workers), "--dist", "loadgroup"] if workers > 1 else []
    args = [sys.executable, "-m", "pytest", "-p", "reliable_compat_plugin", "-p", "no:cacheprovider", "-q",
            "-rfEX", *parallel, *targets, *extra]
    what = f"with reliable on {store}" if store else "plain Dramatiq"
    print(f"== Dramatiq's tests, {what}: {' '.join(targets + chosen)}", flush=True)
    try:
        code = subprocess.run(args, cwd=work, env=env).returncode
    finally:
        if template is not None:
            drop_database(template)
    if code == 5:
        print("FATAL: the compatibility run collected no tests", file=sys.stderr)
        return 1
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", choices=("sqlite", "postgresql", "all"), default="all")
    parser.add_argument("--plain", action="store_true", help="run without reliable (the baseline)")
    parser.add_argument("--source", type=Path, help="a Dramatiq checkout whose tests/ to run instead of the sdist's")
    parser.add_argument("-n", "--workers", type=int, default=1,
                        help="pytest-xdist workers (default 1: Dramatiq's timing-based tests want the CPU)")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    options = parser.parse_args(argv)
    version = metadata.version("dramatiq")
    work = source_tree(options.source) if options.source else test_tree(sdist(version), version)
    add_shim(work)
    if options.plain:
        return run(work, None, (), options.workers, options.pytest_args)
    stores = ("sqlite", "postgresql") if options.store == "all" else (options.store,)
    code = 0
    for store in stores:
        modules = POSTGRESQL_MODULES if store == "postgresql" else ()
        code = run(work, store, modules, options.workers, options.pytest_args) or code
    return code


if __name__ == "__main__":
    raise SystemExit(main())
