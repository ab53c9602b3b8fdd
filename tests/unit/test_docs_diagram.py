"""docs/concepts.md embeds the state diagram generated from reliable.states.TRANSITIONS: they must match."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from reliable.states import TRANSITIONS

from support import docs_script

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _generator() -> ModuleType:
    return docs_script("gen_state_diagram")


def test_concepts_embeds_the_generated_diagram() -> None:
    gen = _generator()
    embedded = gen.embedded((DOCS / "concepts.md").read_text())
    assert embedded is not None, "docs/concepts.md has no ```mermaid stateDiagram-v2 block"
    assert embedded == gen.diagram(), "run `python docs/gen_state_diagram.py` and paste its output into concepts.md"


def test_diagram_draws_every_transition() -> None:
    edges = {}
    for line in _generator().diagram().splitlines():
        match = re.fullmatch(r"    (\w+) --> (\w+): (.+)", line)
        if match and match.group(1) != "[*]":
            for event in match.group(3).split(", "):
                edges[(match.group(1), event)] = match.group(2)
    assert edges == {(state.value, event.value): to.value for (state, event), to in TRANSITIONS.items()}


def test_check_mode_passes() -> None:
    result = subprocess.run([sys.executable, str(DOCS / "gen_state_diagram.py"), "--check"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
