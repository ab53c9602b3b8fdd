"""The operational files shipped in the wheel: policies, alert rules, runbooks, the docs, a Grafana
dashboard and an Alertmanager example.

They are the defaults of the policy loader's documentation, `reliable alerts` and the runbook
renderer when no path is given, `reliable docs` reads the docs, and `reliable init` copies them into
a project for editing. Read them through `path()`, never relative to the current directory.

Where they are: policies/, alert_rules/, runbooks/, docs/ and examples/ live at the top of the repository (one
copy) and the wheel build puts them in this package (pyproject.toml, force-include); alertmanager/
and grafana/ live in this package. `path()` looks in the package first, then, in a source checkout or
an editable install, at the top of the repository.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from ..errors import ConfigError

__all__ = ["SHIPPED", "Copied", "copy_into", "path"]

#: What `reliable init` copies, each a shipped folder, in the order it reports them.
SHIPPED = ("policies", "alert_rules", "runbooks", "alertmanager", "grafana")


def _checkout(package: Path) -> Path | None:
    """The repository holding this package when it runs from a source checkout (or an editable install)."""
    top = package.parent.parent
    return top if (top / "pyproject.toml").is_file() and (top / "reliable").is_dir() else None


def path(name: str = "") -> Path:
    """The shipped file or folder `name` (e.g. "alert_rules"), as a path on disk.

    The package is installed as files (a wheel, an editable install or a checkout); a zipped
    install has no path to give, and says so rather than failing later.
    """
    root = files(__name__)
    if not isinstance(root, Path):
        raise ConfigError(f"reliable's shipped files are not on disk ({root!r}); install the wheel unzipped")
    found = root / name
    if found.exists():
        return found
    top = _checkout(root)
    if name and top is not None and (top / name).exists():
        return top / name
    looked = f"{root}" + (f" and {top}" if top is not None else "")
    raise ConfigError(f"reliable ships no {name!r} (looked in {looked})")


@dataclass(frozen=True)
class Copied:
    """What `copy_into` did: the files written and those left alone because they existed."""

    written: tuple[Path, ...]
    kept: tuple[Path, ...]


def copy_into(project: Path, *, names: tuple[str, ...] = SHIPPED, overwrite: bool = False) -> Copied:
    """Copy the shipped folders `names` into `project` (created if missing).

    An existing file is kept unless `overwrite`: an edited policy is never replaced silently.
    """
    unknown = sorted(set(names) - set(SHIPPED))
    if unknown:
        raise ValueError(f"unknown shipped folder(s) {', '.join(unknown)} (choose from {', '.join(SHIPPED)})")
    written: list[Path] = []
    kept: list[Path] = []
    for name in names:
        source = path(name)
        for file in sorted(p for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            target = project / name / file.relative_to(source)
            if target.exists() and not overwrite:
                kept.append(target)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)
            written.append(target)
    return Copied(tuple(written), tuple(kept))
