"""One colouring of states (reliable.state_tones) for every page, template and the workflow drawing
(issue 42 item 5): every state has a tone, every tone a style, and every template that shows a
state draws it through the one badge."""

from __future__ import annotations

import re
from pathlib import Path

from reliable.state_tones import NODE_STATES, STATE_TONES, TONE_FILLS, TONES, tone
from reliable.states import JobStatus
from reliable.store.workflow_views import WorkflowStatus
from reliable.workflows import planning
from reliable.workflows.drawing import STATE_COLOURS, dag_svg

WEB = Path(__file__).resolve().parents[2] / "reliable" / "web"
TEMPLATES = WEB / "templates"

#: The templates that show a job's, a workflow's or a node's state, and what they show.
STATE_TEMPLATES: dict[str, str] = {
    "_job_status.html": "a job's state (the job page's status line)",
    "_job_table.html": "each listed job's state (jobs, dead letters, review, an operation's sample)",
    "jobs.html": "the state filter's choices",
    "_overview_live.html": "the overview's columns of states",
    "operation.html": "the counted jobs per state",
    "workflows.html": "each workflow's status",
    "workflow.html": "the workflow's status and each node's state",
}


def test_every_state_has_a_tone_and_every_tone_a_style_and_a_fill() -> None:
    states = {*(s.value for s in JobStatus), *WorkflowStatus.ALL, *NODE_STATES}
    assert states <= set(STATE_TONES), sorted(states - set(STATE_TONES))
    assert {planning.WAITING, planning.READY, planning.UPSTREAM_FAILED, planning.SKIPPED, planning.BLOCKED} == set(
        NODE_STATES)
    assert set(STATE_TONES.values()) <= set(TONES) == set(TONE_FILLS)
    css = (WEB / "static" / "console.css").read_text()
    assert all(f".tone-{name} {{" in css for name in TONES)
    assert not re.search(r"\.state-[A-Z]", css), "a per-state rule beside the tones"
    assert tone(JobStatus.FAILED) == tone("FAILED") == tone(WorkflowStatus.FAILED) == "bad"
    assert tone("NO_SUCH_STATE") == "neutral"


def test_the_drawing_fills_each_box_with_its_states_tone() -> None:
    assert all(STATE_COLOURS[state] == TONE_FILLS[name] for state, name in STATE_TONES.items())
    svg = dag_svg(["a", "b"], {"b": ["a"]}, {"a": "FAILED", "b": "UPSTREAM_FAILED"}, {}, {})
    assert svg.count(f'fill="{TONE_FILLS["bad"]}"') == 2


def test_every_template_that_shows_a_state_draws_the_one_badge() -> None:
    for name in STATE_TEMPLATES:
        assert "state_badge(" in (TEMPLATES / name).read_text(), name
    for path in TEMPLATES.glob("*.html"):
        text = path.read_text()
        assert not re.search(r"state-\{\{|state-[A-Z]", text), f"{path.name} colours a state by itself"
        # a state or status printed in a plain tag instead of the badge
        assert not re.search(r'class="tag"[^>]*>\{\{ *[\w.]*(status|state) *\}\}', text), path.name
        if "state_badge(" in text:
            assert path.name in STATE_TEMPLATES, f"{path.name} shows a state: add it to STATE_TEMPLATES"
