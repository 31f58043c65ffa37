"""``dask-cache rm HASH...``: delete entries (a write token, when the server has tokens)."""

from __future__ import annotations

import click

from cache_server.commands._http import ServerConnection, server_options

__all__ = ["rm"]


@click.command()
@server_options
@click.argument("task_hashes", nargs=-1, required=True)
def rm(server: ServerConnection, task_hashes: tuple[str, ...]) -> None:
    """Delete entries (pinned ones too); their objects go once nothing references them.
    Exit 1 if any hash was not found."""
    missing = 0
    for task_hash in task_hashes:
        response = server.request("DELETE", f"/v1/entries/{task_hash}", ok=(204, 404))
        if response.status_code == 404:
            missing += 1
            click.echo(f"not found: {task_hash}", err=True)
        else:
            click.echo(f"removed {task_hash}")
    if missing:
        raise SystemExit(1)
