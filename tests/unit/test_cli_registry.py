"""The lazy CLI: `reliable --help` imports nothing heavy, and its listing matches the real commands."""

from __future__ import annotations

import re
import subprocess
import sys

import click
from click.testing import CliRunner

from reliable.cli.main import COMMANDS, cli


def test_every_lazy_command_loads_and_its_listed_help_is_its_own() -> None:
    ctx = click.Context(cli)
    for name, (target, short_help) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None, name
        alias = re.fullmatch(r"Alias of `([a-z-]+)`.*", short_help)
        if alias:  # an old name: the same command as the canonical one, listed as its alias
            assert COMMANDS[alias.group(1)][0] == target, f"COMMANDS[{name!r}] is not an alias of {alias.group(1)}"
            continue
        assert command.get_short_help_str(200) == short_help, f"COMMANDS[{name!r}] drifted from the command"


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert f"  {name} " in result.output


def test_help_does_not_import_sqlalchemy() -> None:
    code = ("import sys; from reliable.cli.main import cli\n"
            "try:\n    cli(['--help'])\nexcept SystemExit:\n    pass\n"
            "print('sqlalchemy' in sys.modules, 'alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False"
