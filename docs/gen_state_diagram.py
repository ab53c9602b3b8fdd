"""Print the job state machine as a Mermaid stateDiagram, generated from reliable/states.py.

    .venv/bin/python docs/gen_state_diagram.py           # print the ```mermaid block
    .venv/bin/python docs/gen_state_diagram.py --check   # exit 1 if docs/concepts.md differs

docs/concepts.md embeds the output; tests/unit/test_docs_diagram.py fails when they differ, so the
diagram cannot drift from `reliable.states.TRANSITIONS`. Transitions between the same two states
are drawn as one arrow labelled with every event (in table order).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from reliable.states import TERMINAL_STATES, TRANSITIONS, JobStatus

CONCEPTS = Path(__file__).with_name("concepts.md")
_BLOCK = re.compile(r"```mermaid\n(stateDiagram-v2\n.*?)```", re.DOTALL)


def diagram() -> str:
    """The Mermaid source (without the fences), one line per pair of states, ending in a newline."""
    edges: dict[tuple[JobStatus, JobStatus], list[str]] = {}
    for (source, event), to in TRANSITIONS.items():
        edges.setdefault((source, to), []).append(event.value)
    lines = ["stateDiagram-v2", "    [*] --> PENDING: enqueued"]
    lines += [f"    {source.value} --> {to.value}: {', '.join(events)}" for (source, to), events in edges.items()]
    terminal = ",".join(state.value for state in JobStatus if state in TERMINAL_STATES)
    lines += ["    classDef terminal font-weight:bold,stroke-width:3px", f"    class {terminal} terminal"]
    return "\n".join(lines) + "\n"


def embedded(text: str) -> str | None:
    """The stateDiagram embedded in a Markdown text, or None."""
    match = _BLOCK.search(text)
    return match.group(1) if match else None


def main(argv: list[str]) -> int:
    """Print the diagram, or with --check compare it with docs/concepts.md."""
    if "--check" in argv:
        if embedded(CONCEPTS.read_text()) != diagram():
            print(f"{CONCEPTS} is out of date: paste the output of `python {Path(__file__).name}`", file=sys.stderr)
            return 1
        print(f"{CONCEPTS}: state diagram up to date")
        return 0
    print("```mermaid\n" + diagram() + "```")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
