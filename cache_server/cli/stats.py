"""``dask-cache stats``: print a server's statistics."""

from __future__ import annotations

import json

import click

from cache_server.cli.remote import DEFAULT_URL, ServerConnection, server_options

__all__ = ["DEFAULT_URL", "stats"]


@click.command()
@server_options
@click.option("--json", "as_json", is_flag=True, help="print the raw JSON")
def stats(server: ServerConnection, as_json: bool) -> None:
    """Print hits, misses, stores, entries, bytes, hit rate and saved seconds."""
    try:
        data = server.request("GET", "/v1/stats").json()
    except click.ClickException as exc:
        raise click.ClickException(f"cannot read stats: {exc.message}") from exc
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    width = max(map(len, data))
    for name, value in data.items():
        shown = f"{value:.3f}" if isinstance(value, float) else value
        click.echo(f"{name:<{width}}  {shown}")
