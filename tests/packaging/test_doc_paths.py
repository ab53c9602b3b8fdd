"""No shipped documentation page names a file the wheel lacks (the wheel's contents as the build
configuration gives them; tests/packaging/test_wheel.py checks the same against a built wheel)."""

from __future__ import annotations

from doc_paths import REPO, problems, wheel_names_from_source


def test_every_link_and_path_of_the_shipped_pages_is_in_the_wheel() -> None:
    found = problems(wheel_names_from_source(), sorted((REPO / "docs").glob("*.md")))
    assert not found, "\n".join(found)
