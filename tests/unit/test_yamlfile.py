"""The one YAML loader (reliable/yamlfile.py): every file reliable reads passes through it, bounded.

The loaders are enumerated from the source (ast), so a new module reading YAML on its own, or a new
caller of the loader without a row in LOADERS (and so without the alias-bomb test), fails here.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from dramatiq.brokers.stub import StubBroker

import reliable
from reliable import yamlfile
from reliable.alerts import load_config, load_rules
from reliable.cli.main import cli
from reliable.errors import PolicyError
from reliable.operators import OperatorsPolicy
from reliable.policy import Policy
from reliable.policy.check import check_path
from reliable.schedules import load_schedules

PACKAGE = Path(reliable.__file__).parent

#: The modules that may import PyYAML, and why: everything else reads YAML through reliable.yamlfile.
YAML_IMPORTS = {
    "reliable.yamlfile": "the loader",
    "reliable.operators": "walks the bounded nodes yamlfile.compose returns (node classes only)",
    "reliable.alerts.promql": "writes Prometheus rule files (yaml.dump), reads none",
}
#: PyYAML names that read YAML: none may be used outside reliable.yamlfile.
READERS = {"load", "safe_load", "full_load", "unsafe_load", "load_all", "safe_load_all", "compose", "compose_all",
           "parse", "scan", "Loader", "SafeLoader", "FullLoader", "UnsafeLoader", "BaseLoader", "CLoader",
           "CSafeLoader", "CFullLoader", "CBaseLoader", "CUnsafeLoader", "Composer", "Parser", "Scanner", "Reader"}

# A 9 x 9 x ... "billion laughs": 342 bytes, 9**9 strings once expanded.
BOMB = "a: &a [" + ", ".join(["lol"] * 9) + "]\n" + "".join(
    f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))


def _bomb_under(key: str) -> str:
    """The bomb as the value of `key`, so that the file's outer shape is what each loader expects."""
    return f"{key}:\n" + "".join(f"  {line}\n" for line in BOMB.splitlines())


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _yaml_uses(path: Path) -> tuple[bool, set[str]]:
    """Whether the module imports PyYAML, and the PyYAML reader names it uses."""
    imports, names = False, set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "yaml" for a in node.names):
            imports = True
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "yaml" and node.level == 0:
            imports = True
            names.update(a.name for a in node.names if a.name in READERS)
        elif (isinstance(node, ast.Attribute) and node.attr in READERS and isinstance(node.value, ast.Name)
              and node.value.id == "yaml"):
            names.add(node.attr)
    return imports, names


def _callers_of_the_loader() -> set[str]:
    """The modules that call yamlfile's readers (load, parse, compose, read_text)."""
    found = set()
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.ImportFrom) and (node.module or "").endswith("yamlfile")
                    and any(a.name in {"load", "parse", "compose", "read_text"} for a in node.names)):
                found.add(name)
    return found - {"reliable.yamlfile"}


def test_no_module_reads_yaml_on_its_own() -> None:
    offenders = []
    for name, path in _modules().items():
        imports, names = _yaml_uses(path)
        if imports and name not in YAML_IMPORTS:
            offenders.append(f"{name} imports PyYAML: read files through reliable.yamlfile")
        if names and name != "reliable.yamlfile":
            offenders.append(f"{name} uses PyYAML's {', '.join(sorted(names))}: use reliable.yamlfile")
    assert not offenders, "\n".join(offenders)


def test_the_check_finds_a_module_reading_yaml(tmp_path: Path) -> None:
    rogue = tmp_path / "rogue.py"
    rogue.write_text("import yaml\n\ndef read(text):\n    return yaml.safe_load(text)\n")
    assert _yaml_uses(rogue) == (True, {"safe_load"})


def _policy_check_cli(path: Path) -> str:
    result = CliRunner().invoke(cli, ["policy", "check", str(path)])
    assert result.exit_code == 2, result.output
    return result.output


def _alerts_check_cli(path: Path) -> str:
    result = CliRunner().invoke(cli, ["alerts", "check", str(path)])
    assert result.exit_code == 2, result.output
    return result.output


def _policy_check(path: Path) -> str:
    result = check_path(path)
    assert not result.ok
    return "\n".join(str(p) for p in result.problems)


def _worker_boot_policy(path: Path) -> str:
    with pytest.raises(PolicyError) as info:
        reliable.install(StubBroker(), store=f"sqlite:///{path.parent / 'r.db'}", policies=path)
    return str(info.value)


def _worker_boot_schedules(path: Path) -> str:
    with pytest.raises(PolicyError) as info:
        reliable.install(StubBroker(), store=f"sqlite:///{path.parent / 'r.db'}", schedules=str(path))
    return str(info.value)


def _raises(load: Callable[[Path], Any]) -> Callable[[Path], str]:
    def run(path: Path) -> str:
        with pytest.raises(PolicyError) as info:
            load(path)
        return str(info.value)
    return run


#: Every caller of the loader (module -> the surfaces reading through it, each with the outer key
#: its file is expected to have).
LOADERS: dict[str, list[tuple[str, str, Callable[[Path], str]]]] = {
    "reliable.policy.source": [
        ("Policy.load", "defaults", _raises(Policy.load)),
        ("policy check (library)", "defaults", _policy_check),
        ("reliable policy check", "defaults", _policy_check_cli),
        ("worker boot: install(policies=)", "defaults", _worker_boot_policy),
    ],
    "reliable.alerts.rules": [
        ("load_rules", "rules", _raises(load_rules)),
        ("reliable alerts check", "rules", _alerts_check_cli),
    ],
    "reliable.alerts.config": [("load_config", "alertmanager", _raises(load_config))],
    "reliable.schedules.model": [
        ("load_schedules", "schedules", _raises(lambda p: load_schedules(str(p)))),
        ("worker boot: install(schedules=)", "schedules", _worker_boot_schedules),
    ],
    "reliable.operators": [("OperatorsPolicy.load", "operators", _raises(OperatorsPolicy.load))],
}
SURFACES = [(module, *row) for module, rows in LOADERS.items() for row in rows]


def test_every_caller_of_the_loader_is_in_the_table() -> None:
    assert _callers_of_the_loader() == set(LOADERS), "add the new loader to LOADERS (and so to the bomb test)"


@pytest.mark.parametrize(("module", "surface", "key", "run"), SURFACES, ids=[s[1] for s in SURFACES])
def test_an_alias_bomb_is_refused_at_once_with_file_and_line(tmp_path: Path, module: str, surface: str, key: str,
                                                             run: Callable[[Path], str]) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb_under(key))
    assert len(path.read_bytes()) < 600
    started = time.process_time()  # this process's CPU: the bound is on work, not on a loaded machine's clock
    message = run(path)
    elapsed = time.process_time() - started
    assert elapsed < 1.0, f"{surface} took {elapsed:.2f} s"
    assert f"{path}:6: " in message and "aliases counted at their expanded size" in message, message


def test_anchors_within_the_budget_still_work() -> None:
    doc = yamlfile.parse("a: &x {b: 1}\nc: *x\n", "f.yaml")
    assert doc == {"a": {"b": 1}, "c": {"b": 1}} and doc["c"].where.line == 1


@pytest.mark.parametrize(("text", "line", "message"), [
    ("[" * 1000, 1, "nested deeper than 64 levels"),
    ("a: &x [*x]\n", 1, "inside its own anchor"),
    ("a: *nowhere\n", 1, "names no anchor"),
    ("a: &x {b: 1}\nc:\n  <<: *x\n", 3, "merge keys (<<) are not supported"),
    ("a: 1\n---\nb: 2\n", 2, "one YAML document per file"),
    ("a: !!python/object/apply:os.system [ls]\n", 1, "unsupported YAML tag"),
    ("a: !!python/name:os.system x\n", 1, "could not determine a constructor"),
    ("a: 1\nb: [\n", 3, "invalid YAML"),
    ("a: 1\na: 2\n", 2, "duplicate key 'a': defined twice in one mapping (lines 1 and 2)"),
    ("1: a\n", 1, "keys must be strings"),
    ("a:\n" + "  - x\n" * (yamlfile.MAX_NODES + 1), yamlfile.MAX_NODES - 1, "more than 20000 values"),
])
def test_errors_name_file_and_line(text: str, line: int, message: str) -> None:
    started = time.process_time()
    with pytest.raises(PolicyError) as info:
        yamlfile.parse(text, "f.yaml")
    assert time.process_time() - started < 1.0
    assert str(info.value).startswith(f"f.yaml:{line}: ") and message in str(info.value), str(info.value)


def test_a_file_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * yamlfile.MAX_BYTES + "\n")
    with pytest.raises(PolicyError, match=r"policy file larger than 256 KiB"):
        Policy.load(path)


def test_a_file_not_utf8_names_its_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"rules: []\n# caf\xe9\n")
    with pytest.raises(PolicyError, match=rf"^{path}:2: cannot read rule file: not UTF-8 text"):
        load_rules(path)
