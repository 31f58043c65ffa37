"""Fixtures of the server tests.

- ``browser``: Debian's headless chromium through playwright (the dashboard's browser tests).
- ``client``, ``stats``: an httpx client for the session's cache server process, and its
  statistics now.
- In process, on the session's real Redis (each with its own key prefix) and a data
  directory of the test's own: ``index`` (a :class:`RedisIndex`), ``make_cache`` (a factory
  of :class:`ResultCache`), ``make_app`` (a factory of httpx clients of ``create_app``,
  lifespan entered, through httpx's ASGI transport). Tests using them are ``async`` and
  marked ``anyio``. ``index`` and ``make_cache`` run each test twice (``index_url``,
  tests/conftest.py): on one Redis (``[redis]``) and on the session's Redis Cluster
  (``[cluster]``, slow: its index is sharded over three masters).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from cache_server.api.app import create_app
from cache_server.index.client import connect
from cache_server.index.redis_index import RedisIndex
from cache_server.launch import RunningServer
from cache_server.metrics import Metrics
from cache_server.service.cache import ResultCache
from cache_server.settings import Settings
from storage import LocalStorage

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox", "--disable-gpu"])
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def client(cache_server: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=cache_server.url, timeout=60.0) as http:
        yield http


@pytest.fixture
def stats(client: httpx.Client):
    """Call to read the server's stats now."""
    return lambda: client.get("/v1/stats").json()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _prefix() -> str:
    return f"test-{uuid.uuid4().hex[:8]}:"


@pytest.fixture
async def index(index_url: str) -> AsyncIterator[RedisIndex]:
    redis = connect(index_url)
    index = RedisIndex(redis, prefix=_prefix())
    try:
        yield index
    finally:
        await index.close()  # the lookups it counted
        await redis.aclose()


MakeCache = Callable[..., ResultCache]


@pytest.fixture
async def make_cache(index_url: str, tmp_path: Path) -> AsyncIterator[MakeCache]:
    """``make_cache(max_bytes=None, max_body_bytes=2**30)``: a new cache (own prefix, own
    storage directory) on the session's Redis (or Redis Cluster)."""
    indexes = []

    def make(*, max_bytes: int | None = None, max_body_bytes: int = 2**30) -> ResultCache:
        indexes.append(RedisIndex(connect(index_url), prefix=_prefix()))
        data_dir = tmp_path / f"cache-{len(indexes)}"
        return ResultCache(indexes[-1], LocalStorage(data_dir), Metrics(), max_body_bytes,
                           max_bytes)

    try:
        yield make
    finally:
        for index in indexes:
            await index.close()  # the lookups it counted
            await index.redis.aclose()


MakeApp = Callable[..., Any]


@pytest.fixture
async def make_app(redis_url: str, tmp_path: Path) -> AsyncIterator[MakeApp]:
    """``await make_app(**settings)``: an ``httpx.AsyncClient`` of a new app (own prefix,
    own data directory), its lifespan running until the test ends. ``redis_url`` may be
    overridden (e.g. with an unreachable one)."""
    async with AsyncExitStack() as stack:

        async def make(**settings: Any) -> httpx.AsyncClient:
            settings = {"redis_url": redis_url, "redis_prefix": _prefix(),
                        "data_dir": tmp_path / f"app-{uuid.uuid4().hex[:8]}", **settings}
            app = create_app(Settings(**settings))
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            return await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, base_url="http://cache.test"))

        yield make
