"""The FastAPI application: ``create_app(settings)``.

The lifespan connects to Redis (starting the embedded one when no ``redis_url`` is set),
opens the storage under ``data_dir``, and undoes both on shutdown (SIGTERM and SIGINT go
through uvicorn's graceful shutdown, hence through here).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from anyio import to_thread
from fastapi import FastAPI
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse

from cache_server.cache import ResultCache
from cache_server.embedded_redis import EmbeddedRedis
from cache_server.errors import install_error_handlers
from cache_server.index import RedisIndex
from cache_server.metrics import Metrics, MetricsMiddleware
from cache_server.redis_client import connect
from cache_server.routers import entries, health, lookup, objects, stats
from cache_server.settings import Settings
from storage import LocalStorage

__all__ = ["create_app"]


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new app for ``settings`` (default: from the environment). Nothing starts until the
    app's lifespan runs (uvicorn does that)."""
    settings = settings or Settings()
    metrics = Metrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        data_dir = settings.data_dir.resolve()
        data_dir.mkdir(parents=True, exist_ok=True)
        embedded: EmbeddedRedis | None = None
        redis_url = settings.redis_url
        if redis_url is None:
            embedded = EmbeddedRedis(data_dir / "redis")
            redis_url = await to_thread.run_sync(embedded.start)
        client = connect(redis_url)
        try:
            index = RedisIndex(
                client, prefix=settings.redis_prefix, events_maxlen=settings.events_maxlen
            )
            storage = LocalStorage(data_dir)
            app.state.cache = ResultCache(index, storage, metrics, settings.max_body_bytes)
            yield
        finally:
            await client.aclose()
            if embedded is not None:
                await to_thread.run_sync(embedded.stop)

    app = FastAPI(
        title="dask-result-cache",
        summary="Content-addressed, persistent result cache for Dask (protocol v1)",
        version="1",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    for module in (lookup, objects, entries, stats, health):
        app.include_router(module.router)
    install_error_handlers(app)

    @app.exception_handler(ClientDisconnect)
    async def client_went_away(request: Request, exc: ClientDisconnect) -> JSONResponse:
        return JSONResponse({"detail": "client disconnected"}, status_code=400)

    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
