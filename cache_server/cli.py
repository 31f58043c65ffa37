"""The ``dask-cache`` console script and the ``dask cache`` subcommand group.

Each command lives in its own small module under :mod:`cache_server.commands` and is listed
in ``COMMANDS``; modules are imported only when their command runs, so ``dask-cache --help``
and ``dask --help`` stay fast. To add a command, write the module and add one line here.
"""

from __future__ import annotations

import importlib

import click

__all__ = ["COMMANDS", "cli", "main"]

#: command name -> "module:attribute" of a click command.
COMMANDS: dict[str, str] = {
    "demo": "cache_server.commands.demo:demo",
    "gc": "cache_server.commands.gc:gc",
    "ls": "cache_server.commands.ls:ls",
    "pin": "cache_server.commands.pin:pin",
    "reindex": "cache_server.commands.reindex:reindex",
    "rm": "cache_server.commands.rm:rm",
    "serve": "cache_server.commands.serve:serve",
    "show": "cache_server.commands.show:show",
    "stats": "cache_server.commands.stats:stats",
    "unpin": "cache_server.commands.pin:unpin",
}


class LazyGroup(click.Group):
    """A click group whose commands are imported from ``COMMANDS`` on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None or cmd_name not in COMMANDS:
            return command
        module_name, _, attribute = COMMANDS[cmd_name].partition(":")
        command = getattr(importlib.import_module(module_name), attribute)
        self.add_command(command, cmd_name)
        return command


@click.group(name="cache", cls=LazyGroup)
def cli() -> None:
    """dask-result-cache: a persistent, content-addressed result cache for Dask."""


def main() -> None:
    """Entry point of the ``dask-cache`` console script."""
    cli(prog_name="dask-cache")
