"""``dask-cache serve``: run the cache server with uvicorn (httptools + uvloop)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import click

__all__ = ["serve"]


@click.command()
@click.option("--host", default=None, help="interface to bind [env RESULT_CACHE_HOST; 127.0.0.1]")
@click.option("--port", type=int, default=None, help="port [env RESULT_CACHE_PORT; 8780]")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="objects and embedded Redis [env RESULT_CACHE_DATA_DIR; ./.dask-result-cache]",
)
@click.option(
    "--redis-url",
    default=None,
    help="external Redis [env RESULT_CACHE_REDIS_URL]; default: an embedded redis-server",
)
@click.option(
    "--storage-url",
    default=None,
    help="file:///path or s3://bucket/prefix [env RESULT_CACHE_STORAGE_URL]; "
    "default: <data-dir>/objects",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    # docs/design/replicas.md, "Replicas"
    help="replica processes behind the one port",
)
@click.option("--fd", type=int, default=None, hidden=True, help="serve on this listening socket")
def serve(
    host: str | None,
    port: int | None,
    data_dir: Path | None,
    redis_url: str | None,
    storage_url: str | None,
    log_level: str,
    workers: int,
    fd: int | None,
) -> None:
    """Run the cache server. Flags override RESULT_CACHE_* environment variables."""
    import uvicorn

    from cache_server.api.app import create_app
    from cache_server.api.http_protocol import bounded_http_protocol
    from cache_server.settings import Settings

    overrides: dict[str, Any] = {
        "host": host,
        "port": port,
        "data_dir": data_dir,
        "redis_url": redis_url,
        "storage_url": storage_url,
    }
    settings = Settings(**{k: v for k, v in overrides.items() if v is not None})
    if workers > 1:
        from cache_server.replicas import run_replicas

        run_replicas(settings, workers, log_level, fd)
        return
    config = uvicorn.Config(
        create_app(settings, freeze_gc=True),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=log_level == "debug",
        lifespan="on",
        http=bounded_http_protocol(settings.max_header_bytes, settings.head_timeout,
                                   settings.max_connections),
        timeout_graceful_shutdown=30,
    )
    sockets = [socket.socket(fileno=fd)] if fd is not None else None
    server = uvicorn.Server(config)
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C after a clean shutdown
        pass
    if not server.started:
        raise SystemExit(3)
