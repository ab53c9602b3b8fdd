"""A click group that imports each sub-command's module only when that command runs."""

from __future__ import annotations

import importlib
from collections.abc import Mapping

import click

__all__ = ["LazyGroup"]


class LazyGroup(click.Group):
    """Sub-commands named as ``name -> ("module:attribute", "short help")``.

    `reliable --help` lists them from the short help given here, so nothing heavy is imported;
    running `reliable jobs ...` imports only reliable.cli.jobs (and what it needs).
    """

    def __init__(self, *args: object, lazy: Mapping[str, tuple[str, str]], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        """Every command name, loaded or not, sorted."""
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        """Import the command on first use."""
        if cmd_name in self.lazy and cmd_name not in self.commands:
            target, _ = self.lazy[cmd_name]
            module_name, attribute = target.split(":")
            command = getattr(importlib.import_module(module_name), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{target} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """List the commands with their short help without importing them."""
        rows = []
        for name in self.list_commands(ctx):
            if name in self.commands:
                rows.append((name, self.commands[name].get_short_help_str(formatter.width - 20)))
            else:
                rows.append((name, self.lazy[name][1]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
