"""Job ids in the CLI: whole in every table, a unique prefix names a job, no store is guessed, times in UTC."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from control_helpers import ended, make, paused
from rich.console import Console
from rich.table import Table

from reliable.cli.common import CANDIDATES_SHOWN, MIN_PREFIX, id_column, print_table
from reliable.cli.main import cli
from reliable.states import Event, JobStatus
from reliable.store import StateStore

A = "82fda1b2-7c1e-4d6a-9f0e-3b5a1c2d4e01"
B = "82fda1b3-0d4f-4a8b-8c2e-6f7a9b0c1d02"
C = "c0ffee00-1234-4abc-8def-001122334403"
ISO_UTC = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\b")


def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
    """`reliable ARGS` in-process, as an operator named carol, on an 80-column pipe."""
    return CliRunner().invoke(cli, list(args), env={"RELIABLE_STORE": None, "RELIABLE_OPERATOR": "carol",
                                                    "COLUMNS": "80", **(env or {})})


def test_a_unique_prefix_names_the_job_in_every_command(store: StateStore, store_url: str) -> None:
    make(store, A)
    make(store, B)
    ended(store, C, Event.DEAD_LETTER)
    shown = run("jobs", "show", A[:9], "--store", store_url)
    assert shown.exit_code == 0, shown.output
    assert A in shown.stdout and B not in shown.stdout
    events = run("jobs", "events", "c0ffee", "--json", "--store", store_url)
    assert events.exit_code == 0, events.output
    assert "dead_letter" in events.stdout
    assert C in run("dlq", "show", "c0ffee00-12", "--store", store_url).stdout
    # Several ids, each a prefix (one as a table cuts it), the same job twice: each job once.
    paused_ = run("pause", A[:9] + "\N{HORIZONTAL ELLIPSIS}", B[:8] + "...", B, "--yes", "--reason", "maintenance",
                  "--store", store_url)
    assert paused_.exit_code == 0, paused_.output
    assert {store.get(A).status, store.get(B).status} == {JobStatus.PAUSED}
    assert paused_.stdout.count(B) == 1
    cancelled = run("cancel", B[:8], "--reason", "withdrawn", "--store", store_url)
    assert cancelled.exit_code == 0, cancelled.output
    assert cancelled.stdout.startswith(f"cancel {B}:") and store.get(B).status is JobStatus.CANCELLED


def test_a_whole_id_names_its_job_even_when_short_or_the_start_of_another(store: StateStore,
                                                                           store_url: str) -> None:
    for job_id in ("j1", "j12", "job-10", "job-100"):
        make(store, job_id)
    for job_id in ("j1", "job-10"):
        result = run("pause", job_id, "--reason", "r", "--store", store_url)
        assert result.exit_code == 0, result.output
    assert {j: store.get(j).status.value for j in ("j1", "j12", "job-10", "job-100")} == {
        "j1": "PAUSED", "j12": "PENDING", "job-10": "PAUSED", "job-100": "PENDING"}


def test_an_ambiguous_prefix_is_a_usage_error_listing_the_candidates(store: StateStore, store_url: str) -> None:
    make(store, A)
    make(store, B)
    result = run("cancel", "82fda1", "--reason", "typo", "--store", store_url)
    assert result.exit_code == 2
    assert "Usage: " in result.stderr and f"matches several jobs: {A}, {B}; give more characters" in result.stderr
    assert {store.get(A).status, store.get(B).status} == {JobStatus.PENDING}, "nothing was cancelled"


def test_an_ambiguous_prefix_lists_a_bounded_number_of_candidates(store: StateStore, store_url: str) -> None:
    ids = [f"batch-{i:04d}" for i in range(CANDIDATES_SHOWN + 5)]
    for job_id in ids:
        make(store, job_id)
    result = run("jobs", "show", "batch-", "--store", store_url)
    assert result.exit_code == 2
    assert ", ".join(ids[:CANDIDATES_SHOWN]) + ", ...; give more characters" in result.stderr
    assert ids[CANDIDATES_SHOWN] not in result.stderr


def test_unknown_and_too_short_ids_are_clear_errors(store: StateStore, store_url: str) -> None:
    make(store, A)
    unknown = run("retry", "ffffff", "--reason", "r", "--store", store_url)
    assert unknown.exit_code == 2
    assert "no job with id 'ffffff' (nor any id starting with it)" in unknown.stderr
    short = run("review", "show", A[:MIN_PREFIX - 1], "--store", store_url)
    assert short.exit_code == 2
    assert f"(an id prefix needs at least {MIN_PREFIX} characters)" in short.stderr
    several = run("pause", A[:8], "fffffff", "--yes", "--reason", "r", "--store", store_url)
    assert several.exit_code == 2 and "'fffffff'" in several.stderr
    assert store.get(A).status is JobStatus.PENDING, "one bad id: nothing was paused"


def test_without_a_store_commands_say_how_to_give_one_and_create_nothing(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for command in (["jobs", "list"], ["dlq", "show", A], ["pause", A, "--reason", "r"], ["db", "current"],
                    ["recover", "--once"]):
        result = run(*command)
        assert result.exit_code == 2, (command, result.output)
        assert "set RELIABLE_STORE=URL or pass --store URL" in result.stderr, command
    missing = tmp_path / "typo.db"
    for command in (["jobs", "list"], ["db", "current"], ["review", "list"]):
        result = run(*command, env={"RELIABLE_STORE": f"sqlite:///{missing}"})
        assert result.exit_code == 2, (command, result.output)
        assert f"the SQLite file {missing} does not exist" in result.stderr, command
    assert list(tmp_path.iterdir()) == [], "no command created a database"
    created = run("db", "upgrade", "--store", "sqlite:///new.db")
    assert created.exit_code == 0, created.output
    assert (tmp_path / "new.db").exists()
    assert run("jobs", "list", env={"RELIABLE_STORE": "sqlite:///new.db"}).exit_code == 0


def test_tables_off_a_terminal_show_whole_ids_one_row_a_line_and_utc_times(sqlite_url: str) -> None:
    store = StateStore(sqlite_url)
    ended(store, A, Event.DEAD_LETTER)
    ended(store, B, Event.NEED_REVIEW)
    paused(store, C)
    for command, job_id in ((["jobs", "list"], C), (["dlq", "list"], A), (["review", "list"], B)):
        result = run(*command, "--store", sqlite_url)
        assert result.exit_code == 0, result.output
        rows = [line for line in result.stdout.splitlines() if job_id in line]
        assert len(rows) == 1 and ISO_UTC.search(rows[0]), (command, result.stdout)  # one line, time included
        assert "…" not in result.stdout, command
    for command in (["jobs", "show", A], ["dlq", "show", A], ["jobs", "events", A]):
        result = run(*command, "--store", sqlite_url)
        assert result.exit_code == 0, result.output
        table_rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
        assert table_rows and all(ISO_UTC.search(line) for line in table_rows), (command, result.stdout)
        assert not re.search(r"\d\d:\d\d:\d\d(?!Z)", result.stdout), ("a time without its zone", command)


@pytest.mark.parametrize("width", [100, 60])
def test_on_a_terminal_ids_stay_whole_and_other_columns_fold(width: int) -> None:
    table = Table(id_column(), "status", "last error", id_column("attempt_id"))
    table.add_row(A, "DEAD", "ConnectionError: the payment provider timed out", C)
    console = Console(file=io.StringIO(), force_terminal=True, color_system=None, width=width)
    print_table(console, table)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert A in text and C in text
    if width == 100:  # room for both ids: the table fits the terminal, the error folds
        assert max(len(line) for line in text.splitlines()) <= width and len(text.splitlines()) > 5
    # Nothing cut: every character of every cell is printed (folded over lines, but there).
    printed = re.sub(r"[\s\u2500-\u257f]", "", text)
    cells = re.sub(r"\s", "", "".join([*(str(c.header) for c in table.columns),
                                       *(str(cell) for c in table.columns for cell in c.cells)]))
    assert sorted(printed) == sorted(cells)


def test_job_data_is_printed_as_it_is_never_read_as_markup(store: StateStore, store_url: str) -> None:
    odd = "[/x]bbbbbbbb"
    ended(store, odd, Event.DEAD_LETTER, checkpoint=["[/]", "[bold]x"])
    for args in (["jobs", "list"], ["jobs", "show", odd], ["jobs", "events", odd, "--all"], ["dlq", "list"],
                 ["dlq", "show", odd]):
        result = run(*args, "--store", store_url)
        assert result.exit_code == 0, (args, result.output)
        assert odd in result.stdout or args[1] == "events", (args, result.stdout)
    assert "[bold]x" in run("jobs", "show", odd, "--store", store_url).stdout
    assert "[/]" in run("jobs", "events", odd, "--all", "--store", store_url).stdout  # the checkpoint, as written


def test_a_whole_id_that_ends_in_dots_names_itself(store: StateStore, store_url: str) -> None:
    make(store, "abcdefgh")
    make(store, "abcdefgh...")
    shown = run("jobs", "show", "abcdefgh...", "--json", "--store", store_url)
    assert shown.exit_code == 0, shown.output
    assert '"job_id": "abcdefgh..."' in shown.stdout
