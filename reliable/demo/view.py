"""The demo's output: a rich Live view (a job table over a log of what just happened) or plain lines."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

__all__ = ["STATE_STYLES", "WIDE", "JobRow", "LiveView", "PlainView", "make_view"]

STATE_STYLES = {
    "PENDING": "white", "RUNNING": "cyan", "RETRY_WAIT": "yellow", "PAUSED": "blue", "STOPPING": "yellow",
    "STOPPED": "blue", "SUCCEEDED": "green", "FAILED": "red", "CANCELLED": "dim", "REVIEW": "magenta",
    "DEAD": "bold red",
}
LOG_LINES = 40
#: From this terminal width on, tables get a "story step" column.
WIDE = 120


@dataclass(frozen=True)
class JobRow:
    """One line of the job table, read from the store."""

    actor: str
    job_id: str
    state: str
    attempt: int
    progress: str
    worker: str
    step: str


class PlainView:
    """Line-by-line output, for CI logs and pipes."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def start(self, header: str) -> None:
        """Print the header."""
        self.console.print(Text(header))

    def log(self, elapsed: float, subject: str, text: str) -> None:
        """Print one thing that just happened."""
        self.console.print(Text(f"[{elapsed:5.1f}s] {subject}: {text}"), soft_wrap=True)

    def jobs(self, rows: Sequence[JobRow]) -> None:
        """Nothing: plain output only logs changes."""

    def block(self, title: str, text: str) -> None:
        """Print a titled block of text (a runbook)."""
        self.console.print(Text(f"----- {title} -----"))
        self.console.print(Text(text.rstrip()), soft_wrap=True)
        self.console.print(Text("-" * (12 + len(title))))

    def stop(self) -> None:
        """Nothing to stop."""


class LiveView:
    """A live table of the jobs and a rolling log, redrawn several times a second."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._log: deque[Text] = deque(maxlen=LOG_LINES)
        self._rows: Sequence[JobRow] = ()
        self._header = ""
        self._live = Live(console=console, refresh_per_second=8, transient=False)

    def start(self, header: str) -> None:
        """Start redrawing."""
        self._header = header
        self._live.start()
        self._live.update(self._render())

    def log(self, elapsed: float, subject: str, text: str) -> None:
        """Add a line to the rolling log."""
        line = Text(f"{elapsed:5.1f}s ", style="dim")
        line.append(f"{subject}: ", style="bold")
        line.append(text)
        self._log.append(line)
        self._live.update(self._render())

    def jobs(self, rows: Sequence[JobRow]) -> None:
        """Replace the job table."""
        self._rows = rows
        self._live.update(self._render())

    def block(self, title: str, text: str) -> None:
        """Print a runbook above the live area."""
        self._live.console.print(Panel(Markdown(text), title=title, border_style="red"))

    def stop(self) -> None:
        """Draw once more and stop."""
        self._live.update(self._render())
        self._live.stop()

    def _render(self) -> RenderableType:
        wide = self.console.width >= WIDE
        table = Table(expand=True, show_edge=False)
        for column in ("job", "actor", "state", "attempt", "progress", "worker", *(("story step",) if wide else ())):
            table.add_column(column, no_wrap=True, overflow="ellipsis")
        for row in self._rows:
            table.add_row(row.job_id[:8], row.actor, Text(row.state, style=STATE_STYLES.get(row.state, "")),
                          str(row.attempt), row.progress, row.worker, *((row.step,) if wide else ()))
        # One screen row per log line, and only as many as fit under the table: Live crops what overflows.
        header = Text(self._header, style="bold")
        room = max(3, self.console.height - len(self._rows) - 12)
        lines = list(self._log)[-room:]
        log = Text("\n").join(lines) if lines else Text("waiting for the first event...", style="dim")
        log.no_wrap, log.overflow = True, "ellipsis"
        return Group(header, Panel(table, title="jobs (live from the store)"), Panel(log, title="what just happened"))


def make_view(live: bool) -> PlainView | LiveView:
    """A live view on a terminal, plain lines otherwise."""
    if live:
        return LiveView(Console())
    return PlainView(Console(highlight=False, width=160, soft_wrap=True))
