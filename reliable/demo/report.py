"""The end of the demo: a summary table from the store, what differs from the story, where to look next."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from reliable.redact import redact_url
from reliable.store import StateStore

from .alerting import runbooks_dir
from .config import DemoSettings
from .narrate import story_of
from .story import EXPECTED
from .view import STATE_STYLES, WIDE

__all__ = ["report"]


def report(console: Console, store: StateStore, settings: DemoSettings, job_ids: dict[str, str],
           label: Callable[[str | None], str], problems: Sequence[str]) -> int:
    """Print the summary and the commands to explore further; 0 if nothing differs from the story."""
    wide = console.width >= WIDE
    table = Table(title="What happened (read back from the store)", show_lines=False)
    for column in ("job", "actor", "final state", "attempts", *(("story step",) if wide else ()), "what happened"):
        table.add_column(column, overflow="fold")
    for expected in EXPECTED:
        job_id = job_ids.get(expected.actor)
        job = store.find(job_id) if job_id else None
        if job is None:
            table.add_row("-", expected.actor, "missing", "-", *((expected.step,) if wide else ()), "-")
            continue
        mark = "" if job.status is expected.final else f" (expected {expected.final.value})"
        table.add_row(job.job_id[:8], expected.actor, Text(job.status.value + mark, style=STATE_STYLES.get(
            job.status.value, "")), str(job.attempt), *((expected.step,) if wide else ()),
            story_of(store.events(job.job_id), label))
    console.print()
    console.print(table)
    store_arg = shlex.quote(redact_url(settings.store_url))
    review_id = job_ids.get("charge_card", "ID")
    dead_id = job_ids.get("send_webhook", "ID")
    commands = [
        f"reliable jobs list --store {store_arg}",
        f"reliable jobs events {dead_id} --store {store_arg}    # DEAD, requeued, succeeded",
        f"reliable jobs events {job_ids.get('export_report', 'ID')} --store {store_arg}    # paused and resumed",
        f"reliable jobs events {job_ids.get('rebuild_index', 'ID')} --store {store_arg}    # crash and recovery",
        f"reliable review list --store {store_arg}",
        f"reliable review show {review_id} --store {store_arg}",
        f"reliable dlq list --store {store_arg}",
        f"reliable alerts test --store {store_arg} --rules {shlex.quote(str(settings.rules_path))} "
        f"--runbooks {shlex.quote(str(runbooks_dir(settings)))}",
    ]
    console.print(Text("Explore further:", style="bold"))
    for command in commands:
        console.print(Text(f"  {command}"), soft_wrap=True)
    console.print(Text(f"Worker and event logs (JSON lines): {settings.workdir}"), soft_wrap=True)
    if problems:
        console.print(Text("The story did NOT go as expected:", style="bold red"))
        for problem in problems:
            console.print(Text(f"  - {problem}"), soft_wrap=True)
        return 1
    console.print(Text(f"Every job ended as the story says ({len(EXPECTED)} jobs checked against the store).",
                       style="bold green"))
    return 0
