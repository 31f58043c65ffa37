"""``dask-cache stats``: print a server's statistics."""

from __future__ import annotations

import json
import os

import click
import httpx

__all__ = ["DEFAULT_URL", "stats"]

DEFAULT_URL = "http://127.0.0.1:8780"


@click.command()
@click.option(
    "--url",
    default=lambda: os.environ.get("RESULT_CACHE_URL", DEFAULT_URL),
    show_default=f"env RESULT_CACHE_URL or {DEFAULT_URL}",
    help="the cache server",
)
@click.option("--json", "as_json", is_flag=True, help="print the raw JSON")
def stats(url: str, as_json: bool) -> None:
    """Print hits, misses, stores, entries, bytes, hit rate and saved seconds."""
    try:
        response = httpx.get(f"{url.rstrip('/')}/v1/stats", timeout=10.0)
        response.raise_for_status()
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot read stats from {url}: {exc}") from exc
    data = response.json()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    width = max(map(len, data))
    for name, value in data.items():
        shown = f"{value:.3f}" if isinstance(value, float) else value
        click.echo(f"{name:<{width}}  {shown}")
