"""The ``dask-cache`` console script and the ``dask cache`` subcommand group.

Each command lives in its own small module of this package and is listed in ``COMMANDS``;
modules are imported only when their command runs, so ``dask-cache --help`` and
``dask --help`` stay fast. To add a command, write the module and add one line here.
Commands that talk to a running server share :mod:`.remote`; the maintenance commands that
work on a stopped server's data directory share :mod:`.offline`. Every command stops on
SIGTERM as on SIGINT (:mod:`.stopping`), its children with it.
"""

from __future__ import annotations

import importlib

import click

__all__ = ["COMMANDS", "cli", "main"]

#: command name -> "module:attribute" of a click command.
COMMANDS: dict[str, str] = {
    "demo": "cache_server.cli.demo:demo",
    "gc": "cache_server.cli.gc:gc",
    "keygen": "cache_server.cli.keygen:keygen",
    "ls": "cache_server.cli.ls:ls",
    "pin": "cache_server.cli.pin:pin",
    "reindex": "cache_server.cli.reindex:reindex",
    "rm": "cache_server.cli.rm:rm",
    "serve": "cache_server.cli.serve:serve",
    "show": "cache_server.cli.show:show",
    "stats": "cache_server.cli.stats:stats",
    "unpin": "cache_server.cli.pin:unpin",
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
@click.pass_context
def cli(ctx: click.Context) -> None:
    """dask-result-cache: a persistent, content-addressed result cache for Dask."""
    from .stopping import stop_on_signals

    ctx.with_resource(stop_on_signals())  # SIGTERM stops the children as Ctrl-C does


def main() -> None:
    """Entry point of the ``dask-cache`` console script."""
    cli(prog_name="dask-cache")
