"""The FastAPI application: ``create_app(settings)``.

The lifespan connects to Redis (starting the embedded one, under the data directory's lock,
when no ``redis_url`` is set; with one, this server is a replica among others), opens the
storage under ``data_dir`` and removes what interrupted writes left there, and undoes all
of it on shutdown (SIGTERM and SIGINT go through uvicorn's graceful shutdown, hence through here).

Authentication (:mod:`cache_server.api.auth`): every route but ``/healthz`` needs a read token,
and routes that change the cache a write token, once any token is configured. The API
description (``/openapi.json``, ``/docs``) is served behind the same read check.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.staticfiles import StaticFiles
from redis.exceptions import RedisError
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from cache_server.api.auth import (
    AuthenticateFirst,
    ReadAccess,
    Scope,
    Throttle,
    TokenTable,
    check_exposure,
    is_loopback,
    refusal,
)
from cache_server.api.cross_site import CrossSiteGuard
from cache_server.api.errors import answer_error, answer_validation_error, install_error_handlers
from cache_server.api.middleware import JsonBodyLimit, MetricsMiddleware
from cache_server.api.responses import COMMON_ERRORS, errors
from cache_server.api.routers import (
    dashboard,
    entries,
    health,
    leases,
    lookup,
    objects,
    recipes,
    runs,
    staging,
    stats,
)
from cache_server.api.sessions import Sessions
from cache_server.metrics import Metrics
from cache_server.runtime import open_cache
from cache_server.settings import Settings

__all__ = ["create_app"]

logger = logging.getLogger("cache_server")

#: How long a starting server waits for a previous one on the same data dir to let go.
LOCK_WAIT_SECONDS = 10.0
#: The package's web assets (vendored Swagger UI and ReDoc, the dashboard's files), public.
STATIC_DIR = Path(__file__).parent / "static"
STATIC_URL = "/static"
_VENDOR = f"{STATIC_URL}/vendor"


def _warn_without_tokens(address: str) -> None:
    reach = ("any process on this machine" if is_loopback(address)
             else f"anyone who can reach {address}")
    logger.warning(
        "\n%s\nNO AUTHENTICATION: no tokens are configured, so %s can read, overwrite and "
        "delete cached results, and make clients without a signing key run any code when "
        "they load them.\nSet RESULT_CACHE_TOKENS='read:<token>,write:<token>' (or "
        "RESULT_CACHE_TOKENS_FILE) to require bearer tokens, and give clients a "
        "result-cache.signing-key (dask-cache keygen).\n%s",
        "!" * 78, reach, "!" * 78,
    )  # fmt: skip


def _warn_about_pickles() -> None:
    logger.warning(
        "Cached values that are not arrays are pickles: loading one runs code written by "
        "whoever stored it (every write token holder). Clients that set "
        "result-cache.signing-key (DASK_RESULT_CACHE__SIGNING_KEY; `dask-cache keygen` makes "
        "one) load only values signed with their key; see docs/protocol.md, 'Signed results'."
    )


def create_app(settings: Settings | None = None, *, freeze_gc: bool = False) -> FastAPI:
    """A new app for ``settings`` (default: from the environment). Nothing starts until the
    app's lifespan runs (uvicorn does that). ``freeze_gc``: once started, the process's
    objects are frozen (``gc.freeze``): what exists then (modules, the app, connection
    pools) lives as long as the server, and the collector's full collections walked all
    of it again during every burst of requests (a 1000-object batch: ~1/3 of the server's
    CPU; BENCHMARKS.md, section 19). For ``dask-cache serve``, which owns its process; an
    app run inside another program leaves that program's collector alone."""
    settings = settings or Settings()
    metrics = Metrics()
    # Parsed now, so a malformed token configuration fails before anything starts.
    tokens = TokenTable.from_settings(settings.tokens, settings.tokens_file)
    # In a container the server binds 0.0.0.0; what matters is where its port is published.
    exposed = settings.published_host or settings.host
    check_exposure(tokens, exposed, settings.allow_open)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if tokens.enabled:
            _warn_about_pickles()
        else:
            _warn_without_tokens(exposed)
        async with open_cache(settings, metrics, lock_wait=LOCK_WAIT_SECONDS) as cache:
            swept = await cache.remove_leftovers()
            if swept:
                logger.warning("removed %d temporary paths left by interrupted writes", swept)
            chores = [asyncio.create_task(cache.replicas.keep_registered()),
                      asyncio.create_task(cache.keep_leases_swept())]
            app.state.cache = cache
            app.state.sessions = Sessions(
                cache.index.redis, cache.index.prefix, settings.session_seconds,
                Sessions.secret_for(list(tokens.scopes), settings.data_dir))
            if freeze_gc:
                gc.collect()  # what startup left as garbage goes first, not frozen for good
                gc.freeze()
            try:
                yield
            finally:
                for chore in chores:
                    chore.cancel()
                    with suppress(asyncio.CancelledError, RedisError, OSError):
                        await chore
                with suppress(RedisError, OSError):
                    await cache.replicas.unregister()

    app = FastAPI(
        title="dask-result-cache",
        summary="Content-addressed, persistent result cache for Dask (protocol v1)",
        version="1",
        lifespan=lifespan,
        openapi_url=None,  # served below, behind the read check
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.tokens = tokens
    app.state.throttle = Throttle(free=settings.token_failures_allowed)
    guarded = errors(*COMMON_ERRORS)
    for module in (lookup, leases, staging, objects, entries, stats, runs, recipes):
        app.include_router(module.router, dependencies=[ReadAccess], responses=guarded)
    app.include_router(health.router, responses=errors(503))
    app.include_router(dashboard.router)  # pages check access per route (login is open)
    install_error_handlers(app)

    @app.exception_handler(RequestValidationError)
    async def authenticate_first(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI parses a JSON body before running dependencies: a stranger's malformed
        # lookup must still get 401, not a 422 that tells him about our validation.
        denied = await refusal(request, Scope.read)
        if denied is not None:
            return await answer_error(request, denied)
        return await answer_validation_error(request, exc)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[ReadAccess])
    async def openapi_schema() -> JSONResponse:
        return JSONResponse(app.openapi())

    # The API's pages load only assets this package serves (static/vendor/README.md).
    app.mount(STATIC_URL, StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/docs", include_in_schema=False, dependencies=[ReadAccess])
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json", title="dask-result-cache",
            swagger_js_url=f"{_VENDOR}/swagger-ui/swagger-ui-bundle.js",
            swagger_css_url=f"{_VENDOR}/swagger-ui/swagger-ui.css",
            swagger_favicon_url=f"{_VENDOR}/swagger-ui/favicon-32x32.png")

    @app.get("/redoc", include_in_schema=False, dependencies=[ReadAccess])
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url="/openapi.json", title="dask-result-cache",
            redoc_js_url=f"{_VENDOR}/redoc/redoc.standalone.js",
            redoc_favicon_url=f"{_VENDOR}/swagger-ui/favicon-32x32.png",
            with_google_fonts=False)

    app.add_middleware(JsonBodyLimit, limit=settings.max_json_bytes)
    # With or without tokens, before any route runs (a stranger still gets his 401 first).
    app.add_middleware(CrossSiteGuard)
    if tokens.enabled:  # outermost but for the metrics: before any body is read
        app.add_middleware(AuthenticateFirst)
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    return app
