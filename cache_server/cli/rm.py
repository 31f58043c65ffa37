"""``dask-cache rm HASH...``: delete entries (a write token, when the server has tokens)."""

from __future__ import annotations

import click

from cache_server.cli.remote import ServerConnection, for_each_entry, server_options

__all__ = ["rm"]


@click.command()
@server_options
@click.argument("task_hashes", nargs=-1, required=True)
def rm(server: ServerConnection, task_hashes: tuple[str, ...]) -> None:
    """Delete entries (pinned ones too); their objects go once nothing references them.
    Exit 1 if any hash was not found."""
    for_each_entry(server, task_hashes, "DELETE", "/v1/entries/{}", "removed")
