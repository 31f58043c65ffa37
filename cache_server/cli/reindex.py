"""``dask-cache reindex``: rebuild the Redis index from the storage sidecars.

For a Redis that lost its data (or a new, empty one): every entry any sidecar lists is
indexed again, pins included. It never deletes anything. Runs while the server is stopped
(it takes the data directory's lock).
"""

from __future__ import annotations

from typing import Any

import click

from cache_server.cli.offline import offline_options, run_maintenance

__all__ = ["reindex"]


@click.command()
@offline_options
def reindex(settings: Any, verify: bool, as_json: bool) -> None:
    """Index every stored entry the index lacks. The server must be stopped."""
    from cache_server.service.maintenance import reindex as rebuild

    run_maintenance(settings, lambda cache: rebuild(cache, verify=verify), as_json)
