"""``dask-cache gc``: sweep crashed writes and orphans, repair sidecars, enforce the cap.

Runs on a data directory and its Redis while the server is stopped (it takes the data
directory's lock, and refuses to run while a server holds it): for example right after a
crash, before restarting the server.
"""

from __future__ import annotations

from typing import Any

import click

from cache_server.cli.offline import offline_options, run_maintenance

__all__ = ["gc"]


@click.command()
@offline_options
@click.option("--max-bytes", default=None,
              help="cap to enforce, e.g. 500GB [env RESULT_CACHE_MAX_BYTES; none]")
def gc(settings: Any, verify: bool, as_json: bool) -> None:
    """Remove interrupted writes, manifests without objects, objects without manifests;
    evict (never pinned entries) down to the size cap. The server must be stopped."""
    from cache_server.service.maintenance import collect_garbage

    run_maintenance(settings, lambda cache: collect_garbage(cache, verify=verify), as_json)
