"""``dask-cache ls``: list entries, in hash order (the order the server pages in)."""

from __future__ import annotations

import json
import time

import click

from cache_server.cli.remote import ServerConnection, server_options

__all__ = ["ls"]

_PAGE = 1000


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


@click.command()
@server_options
@click.option("--label", default=None, help="only entries with exactly this label")
@click.option("--limit", type=click.IntRange(min=1), default=100, show_default=True,
              help="most entries to list")
@click.option("--all", "everything", is_flag=True, help="list every entry (ignores --limit)")
@click.option("--after", "cursor", default=None,
              help="continue a listing that stopped at --limit (the cursor it printed)")
@click.option("--json", "as_json", is_flag=True, help="one JSON manifest per line")
def ls(server: ServerConnection, label: str | None, limit: int, everything: bool,
       cursor: str | None, as_json: bool) -> None:
    """List entries: hash, label, kind, size, compute seconds, hits, last access, pin.

    A listing that stops at --limit with entries left says so on stderr, with the
    command that lists the next ones."""
    shown, now = 0, time.time()
    if not as_json:
        click.echo(f"{'hash':32}  {'label':20} {'kind':7} {'bytes':>12} {'seconds':>9} "
                   f"{'hits':>6} {'idle':>5}  pin")
    while everything or shown < limit:
        params: dict[str, str | int] = {"limit": _PAGE if everything else min(_PAGE,
                                                                              limit - shown)}
        if label is not None:
            params["label"] = label
        if cursor:
            params["cursor"] = cursor
        page = server.request("GET", "/v1/entries", params=params).json()
        for entry in page["entries"]:
            shown += 1
            if as_json:
                click.echo(json.dumps(entry))
                continue
            click.echo(f"{entry['hash']}  {entry['label'][:20]:20} {entry['kind']:7} "
                       f"{entry['nbytes']:>12} {entry['compute_seconds']:>9.3f} "
                       f"{entry['hits']:>6} {_age(now - entry['last_access']):>5}  "
                       f"{'yes' if entry.get('pinned') else ''}")
        cursor = page["next_cursor"]
        if not cursor:
            return
    params = {"limit": 1, "cursor": cursor} | ({"label": label} if label is not None else {})
    if not server.request("GET", "/v1/entries", params=params).json()["entries"]:
        return  # the limit fell on the last entry
    # Never silently capped: say where the listing stopped and how to go on.
    click.echo(f"listed {shown} entries (--limit {limit}); more remain: continue with "
               f"`dask-cache ls --after {cursor}`, or list them all with --all", err=True)
