"""What the browser tests share besides fixtures: the rig they drive, where Chromium is, screenshots."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reliable.store import StateStore

from workers import WorkerProcess

CHROMIUM = os.environ.get("RELIABLE_TEST_CHROMIUM", "/usr/bin/chromium")
#: Set to 1 to refresh docs/images/console-*.png from the screenshots the tests take.
SCREENSHOTS_ENV = "RELIABLE_SCREENSHOTS"
DOC_IMAGES = Path(__file__).resolve().parents[3] / "docs" / "images"
TIMEOUT_MS = 30_000


@dataclass
class Rig:
    """Everything a browser test drives: the console's URL, the store, the actors, a signed-in token."""

    base: str
    store: StateStore
    actors: dict[str, Any]
    admin_token: str
    worker: WorkerProcess
    shots: Path

    def screenshot(self, page: Any, name: str) -> Path:
        """Screenshot `page` as console-`name`.png into the test's directory, and into docs/images when
        $RELIABLE_SCREENSHOTS is set."""
        path = self.shots / f"console-{name}.png"
        page.screenshot(path=str(path))  # the viewport only: small PNGs in the repository
        if os.environ.get(SCREENSHOTS_ENV):
            DOC_IMAGES.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, DOC_IMAGES / path.name)
        return path
