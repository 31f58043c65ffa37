"""``dask-cache pin HASH...`` and ``dask-cache unpin HASH...``: protect entries from eviction."""

from __future__ import annotations

import click

from cache_server.cli.remote import ServerConnection, for_each_entry, server_options

__all__ = ["pin", "unpin"]


@click.command()
@server_options
@click.argument("task_hashes", nargs=-1, required=True)
def pin(server: ServerConnection, task_hashes: tuple[str, ...]) -> None:
    """Never evict these entries (they survive reindex). Exit 1 if any was not found."""
    for_each_entry(server, task_hashes, "POST", "/v1/entries/{}/pin", "pinned")


@click.command()
@server_options
@click.argument("task_hashes", nargs=-1, required=True)
def unpin(server: ServerConnection, task_hashes: tuple[str, ...]) -> None:
    """Make pinned entries evictable again. Exit 1 if any was not found."""
    for_each_entry(server, task_hashes, "POST", "/v1/entries/{}/unpin", "unpinned")
