"""What the maintenance commands (``gc``, ``reindex``) share: the data directory and Redis
options, the same settings (and ``RESULT_CACHE_*`` variables) the server reads, and running
an async maintenance function under the data directory's lock."""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import click

__all__ = ["offline_options", "run_maintenance"]


def offline_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--data-dir``, ``--redis-url``, ``--redis-prefix``, ``--verify`` and ``--json``;
    the command receives ``settings`` (a :class:`~cache_server.settings.Settings`)."""

    @click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path),
                  default=None,
                  help="the server's data dir [env RESULT_CACHE_DATA_DIR; ./.dask-result-cache]")
    @click.option("--redis-url", default=None,
                  help="the server's Redis [env RESULT_CACHE_REDIS_URL]; default: the "
                  "embedded Redis of the data dir")
    @click.option("--redis-prefix", default=None,
                  help="the server's key prefix [env RESULT_CACHE_REDIS_PREFIX; rc:]")
    @click.option("--verify", is_flag=True,
                  help="read every object and check its digest (a full read of the cache)")
    @click.option("--json", "as_json", is_flag=True, help="print the report as JSON")
    @functools.wraps(command)
    def with_settings(data_dir: Path | None, redis_url: str | None, redis_prefix: str | None,
                      **kwargs: Any) -> Any:
        from cache_server.settings import Settings

        overrides = {"data_dir": data_dir, "redis_url": redis_url, "redis_prefix": redis_prefix,
                     "max_bytes": kwargs.pop("max_bytes", None)}
        settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
        # With a shared Redis and a storage URL nothing lives in the data directory.
        shared = settings.redis_url is not None and settings.storage_url is not None
        if not shared and not settings.data_dir.is_dir():
            raise click.ClickException(f"no data directory {settings.data_dir}")
        return command(settings=settings, **kwargs)

    return with_settings


def run_maintenance(settings: Any, work: Callable[[Any], Awaitable[Any]], as_json: bool) -> None:
    """Run ``work(cache)`` under :func:`cache_server.runtime.open_cache` and print its
    report; a busy data directory is a clean error."""
    from cache_server.data_lock import DataDirBusy
    from cache_server.index.locks import LockBusy
    from cache_server.runtime import open_cache

    async def main() -> Any:
        async with open_cache(settings) as cache:
            return await work(cache)

    try:
        report = anyio.run(main)
    except (DataDirBusy, LockBusy) as exc:
        raise click.ClickException(str(exc)) from None
    data = report.as_dict()
    if as_json:
        click.echo(json.dumps(data))
        return
    width = max(map(len, data))
    for name, value in data.items():
        click.echo(f"{name:<{width}}  {value}")
