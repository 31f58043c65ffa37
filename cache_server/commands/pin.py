"""``dask-cache pin HASH...`` and ``dask-cache unpin HASH...``: protect entries from eviction."""

from __future__ import annotations

import click

from cache_server.commands._http import ServerConnection, server_options

__all__ = ["pin", "unpin"]


def _set_pinned(server: ServerConnection, task_hashes: tuple[str, ...], action: str) -> None:
    missing = 0
    for task_hash in task_hashes:
        response = server.request("POST", f"/v1/entries/{task_hash}/{action}", ok=(200, 404))
        if response.status_code == 404:
            missing += 1
            click.echo(f"not found: {task_hash}", err=True)
        else:
            click.echo(f"{action}ned {task_hash}")
    if missing:
        raise SystemExit(1)


@click.command()
@server_options
@click.argument("task_hashes", nargs=-1, required=True)
def pin(server: ServerConnection, task_hashes: tuple[str, ...]) -> None:
    """Never evict these entries (they survive reindex). Exit 1 if any was not found."""
    _set_pinned(server, task_hashes, "pin")


@click.command()
@server_options
@click.argument("task_hashes", nargs=-1, required=True)
def unpin(server: ServerConnection, task_hashes: tuple[str, ...]) -> None:
    """Make pinned entries evictable again. Exit 1 if any was not found."""
    _set_pinned(server, task_hashes, "unpin")
