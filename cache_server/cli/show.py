"""``dask-cache show HASH``: print one entry's manifest."""

from __future__ import annotations

import json

import click

from cache_server.cli.remote import ServerConnection, server_options

__all__ = ["show"]


@click.command()
@server_options
@click.argument("task_hash")
def show(server: ServerConnection, task_hash: str) -> None:
    """Print the manifest of TASK_HASH as JSON; exit 1 if there is no such entry."""
    response = server.request("GET", f"/v1/entries/{task_hash}", ok=(200, 404))
    if response.status_code == 404:
        raise click.ClickException(f"no entry {task_hash}")
    click.echo(json.dumps(response.json(), indent=2))
