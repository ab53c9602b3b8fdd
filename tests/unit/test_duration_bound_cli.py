"""Issue 38: every CLI option taking a duration refuses one past the grammar's bound with a usage
error (exit 2) naming the option, never an OverflowError traceback.

The options are found by walking the command tree: those of type `Duration`, and those that parse a
duration themselves (a metavar or help naming a duration), each with the form it takes. A new
option of either kind is covered without editing this test; one whose form is unknown fails it.
"""

from __future__ import annotations

import click
from click.testing import CliRunner

from reliable.cli.common import Duration
from reliable.cli.main import cli

from support import cli_commands

TOO_LONG = "99999999999999999999d"
#: Options that parse a duration inside a larger value, by their first name: the value to give.
EMBEDDED = {"--sla": f"RUNNING={TOO_LONG}", "--crash-loop": f"5/{TOO_LONG}"}


def duration_options() -> list[tuple[tuple[str, ...], click.Option]]:
    found = []
    for path, command in cli_commands():
        for option in command.params:
            if not isinstance(option, click.Option) or option.is_flag:
                continue
            text = f"{option.metavar or ''} {option.help or ''}".lower()
            if isinstance(option.type, Duration) or "duration" in text:
                found.append((path, option))
    return found


def test_every_duration_option_refuses_one_past_the_bound() -> None:
    found = duration_options()
    names = {option.opts[0] for _, option in found}
    assert {"--older-than", "--since", "--interval", "--sweep-after", "--expires", "--sla", "--crash-loop",
            "--restart-backoff", "--boot-timeout", "--shutdown-timeout"} <= names
    for path, option in found:
        name = option.opts[0]
        value = EMBEDDED.get(name, TOO_LONG)
        result = CliRunner().invoke(cli, [*path, name, value], env={"RELIABLE_OPERATOR": "carol"})
        where = f"reliable {' '.join(path)} {name} {value}"
        assert result.exception is None or isinstance(result.exception, SystemExit), (where, result.exception)
        assert result.exit_code == 2, (where, result.output)
        assert "at most 3155760000 seconds (36525d, 100 years)" in result.output, (where, result.output)
        assert "Traceback" not in result.output and "OverflowError" not in result.output, where
