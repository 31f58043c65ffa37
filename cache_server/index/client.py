"""Redis clients for the index: one Redis, a Sentinel's primary, or a Redis Cluster.

:func:`connect` takes ``RESULT_CACHE_REDIS_URL``:

- ``redis://[[user]:password@]host:port/db``, ``rediss://`` (TLS), ``unix:///path``: one Redis;
- ``redis+sentinel://[[user]:password@]host:port,host:port,.../<master>[/db]`` (``rediss+``:
  TLS to the sentinels and the primary): the primary the sentinels name (redis-py's
  ``Sentinel``), found again through them after a failover. ``?sentinel_password=`` (and
  ``sentinel_username=``) when the sentinels have credentials of their own;
- ``redis+cluster://[[user]:password@]host:port,host:port,...`` (``rediss+``: TLS): a Redis
  Cluster found from any of these seed nodes (redis-py's ``RedisCluster``), as a
  :class:`ClusterClient`.

Query options are redis-py's (``socket_timeout``, ``ssl_ca_certs``, ``ssl_cert_reqs``, ...).

Packing: redis-py's asyncio connections pack every argument in Python (~1 µs each), which
dominates a 100k-hash ``SMISMEMBER`` (about 120 ms of packing against ~60 ms in all with
hiredis on this machine). The synchronous client already uses hiredis's packer; we give
every async connection class the same one, and call it directly: redis-py's wrapper re-walks
every argument in Python first (~20 ms of a 100k-hash lookup's ~40 ms of packing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote, urlencode

import numpy as np
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import Connection, SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import ExponentialWithJitterBackoff
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError, RedisClusterException
from redis.utils import HIREDIS_AVAILABLE

if HIREDIS_AVAILABLE:
    import hiredis

__all__ = ["ClusterClient", "IndexRedis", "Prepacked", "RedisTarget", "connect",
           "pack_fixed_width", "parse_redis_url"]

#: Connection timeouts for Sentinel and Cluster (unless the URL sets them): a primary that
#: vanished must cost a request seconds, not forever, so the server can answer 503.
_HA_TIMEOUTS = {"socket_connect_timeout": 3.0, "socket_timeout": 10.0}


def _ha_retry() -> Retry:
    """Sentinel and Cluster retry a lost connection three times within about half a
    second, then the request is answered 503 with ``Retry-After``: clients wait and come
    back, while redis-py's default (ten tries, up to a second apart) held each request
    for ~5 s of a failover that takes about as long."""
    return Retry(ExponentialWithJitterBackoff(base=0.02, cap=0.25), retries=3)
_SENTINEL_OPTIONS = ("sentinel_password", "sentinel_username")


@dataclass(frozen=True)
class Prepacked:
    """A whole command already in Redis's wire format (RESP); sent as it is by
    ``redis.execute_command(name, prepacked)``, through redis-py's usual retries,
    error handling and response parsing."""

    wire: bytes


def pack_fixed_width(name: str, key: str, items: bytes, width: int) -> Prepacked:
    """``name key item item ...`` for ``items`` of ``width`` bytes each, back to back.

    Built with one numpy copy: a 100k-hash ``SMISMEMBER`` packs in ~5 ms this way, against
    ~20 ms for hiredis packing 100k separate strings (and ~15 ms more to cut them out).
    """
    n, rest = divmod(len(items), width)
    if rest or not n:
        raise ValueError(f"{len(items)} bytes are not a whole number of {width}-byte items")
    head = f"*{n + 2}\r\n${len(name)}\r\n{name}\r\n${len(key.encode())}\r\n".encode()
    prefix = f"${width}\r\n".encode()
    rows = np.empty((n, len(prefix) + width + 2), np.uint8)
    rows[:, : len(prefix)] = np.frombuffer(prefix, np.uint8)
    rows[:, len(prefix) : len(prefix) + width] = np.frombuffer(items, np.uint8).reshape(n, width)
    rows[:, -2:] = np.frombuffer(b"\r\n", np.uint8)
    return Prepacked(head + key.encode() + b"\r\n" + rows.tobytes())


class _HiredisPacking:
    _serializer = HiredisRespSerializer() if HIREDIS_AVAILABLE else None

    def pack_command(self, *args: Any) -> list[bytes]:
        if len(args) == 2 and isinstance(args[1], Prepacked):
            return [args[1].wire]
        if self._serializer is None:
            return super().pack_command(*args)  # type: ignore[misc]
        # Plain str/bytes/number arguments (every large command we send) go straight to
        # hiredis; multi-word command names and buffers take redis-py's path.
        if isinstance(args[0], str) and " " not in args[0]:
            try:
                return [hiredis.pack_command(args)]
            except TypeError:
                pass
        return self._serializer.pack(*args)


_PACKING_CLASSES: dict[type, type] = {}


def _with_hiredis_packing(connection_class: type) -> type:
    if connection_class not in _PACKING_CLASSES:
        name = f"Hiredis{connection_class.__name__}"
        _PACKING_CLASSES[connection_class] = type(name, (_HiredisPacking, connection_class), {})
    return _PACKING_CLASSES[connection_class]


@dataclass(frozen=True)
class RedisTarget:
    """What a ``RESULT_CACHE_REDIS_URL`` names (see the module docstring)."""

    kind: Literal["redis", "sentinel", "cluster"]
    #: (host, port) of each sentinel or seed node; empty for one Redis.
    hosts: tuple[tuple[str, int], ...] = ()
    #: The Sentinel master's name.
    master: str | None = None
    #: Keyword arguments of redis-py's clients: credentials, db, TLS, timeouts.
    options: dict[str, Any] = field(default_factory=dict)
    #: The sentinels' own credentials (and TLS, as the primary's).
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    tls: bool = False


def parse_redis_url(url: str) -> RedisTarget:
    """The target of ``url``; ``ValueError`` naming what is wrong with it."""
    scheme, sep, rest = url.partition("://")
    base, plus, kind = scheme.partition("+")
    if not sep or base not in ("redis", "rediss", "unix") or (plus and (
            base == "unix" or kind not in ("sentinel", "cluster"))):
        raise ValueError(f"not a Redis URL: {_redacted(url)!r} (redis://, rediss://, unix://, "
                         "redis+sentinel://, redis+cluster://, rediss+...)")
    if not plus:
        return RedisTarget("redis", options=dict(parse_url(url)))
    location, _, query = rest.partition("?")
    netloc, _, path = location.partition("/")
    credentials, _, hostlist = netloc.rpartition("@")
    default_port = 26379 if kind == "sentinel" else 6379
    hosts = tuple(_host_port(item, default_port, url) for item in hostlist.split(",") if item)
    if not hosts:
        raise ValueError(f"{_redacted(url)!r} names no host")
    params = parse_qsl(query, keep_blank_values=True)
    ours = {k: v for k, v in params if k in _SENTINEL_OPTIONS}
    theirs = urlencode([(k, v) for k, v in params if k not in _SENTINEL_OPTIONS])
    parts = [unquote(p) for p in path.split("/") if p]
    master = None
    if kind == "sentinel":
        if not parts:
            raise ValueError(f"{_redacted(url)!r} names no master: "
                             "redis+sentinel://host:port,.../<master-name>")
        master, parts = parts[0], parts[1:]
    if len(parts) > 1 or (kind == "cluster" and parts and parts[0] != "0"):
        raise ValueError(f"{_redacted(url)!r}: unexpected path "
                         f"{'/'.join(parts)!r} (a Cluster has only database 0)")
    one = f"{base}://{credentials + '@' if credentials else ''}{hosts[0][0]}:{hosts[0][1]}"
    options: dict[str, Any] = dict(parse_url(f"{one}/{parts[0] if parts else ''}?{theirs}"))
    for key in ("host", "port", "connection_class"):
        options.pop(key, None)
    if kind == "cluster":
        options.pop("db", None)
    for key, value in _HA_TIMEOUTS.items():
        options.setdefault(key, value)
    tls = base == "rediss"
    sentinel_options = {k.removeprefix("sentinel_"): v for k, v in ours.items()}
    return RedisTarget("sentinel" if kind == "sentinel" else "cluster", hosts, master,
                       options, sentinel_options, tls)


def _host_port(item: str, default_port: int, url: str) -> tuple[str, int]:
    host, colon, port = item.rpartition(":")
    if not colon or "]" in port:  # no port (an IPv6 address has colons of its own)
        host, port = item, str(default_port)
    if not port.isdigit() or not host.strip("[]"):
        raise ValueError(f"{_redacted(url)!r}: {item!r} is not host:port")
    return host.strip("[]"), int(port)


def _redacted(url: str) -> str:
    """``url`` without its password (for messages)."""
    scheme, sep, rest = url.partition("://")
    credentials, at, tail = rest.partition("@")
    if not at or "/" in credentials:
        return url
    user = credentials.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{tail}"


#: What :func:`connect` returns.
IndexRedis = aioredis.Redis | RedisCluster


def connect(url: str) -> IndexRedis:
    """A client for ``url`` (module docstring) that returns strings: an ``aioredis.Redis``
    for one Redis or a Sentinel's primary, a :class:`ClusterClient` for a Cluster.
    ``ValueError`` for a URL that names none. Connections are made lazily, on first use."""
    target = parse_redis_url(url)
    if target.kind == "redis":
        client = aioredis.from_url(url, decode_responses=True)
        pool = client.connection_pool
        pool.connection_class = _with_hiredis_packing(pool.connection_class)
        return client
    if target.kind == "sentinel":
        connection = SentinelManagedSSLConnection if target.tls else SentinelManagedConnection
        tls = {"ssl": True} | {k: v for k, v in target.options.items()
                               if k.startswith("ssl_")} if target.tls else {}
        sentinels = Sentinel(list(target.hosts), sentinel_kwargs={
            **{k: v for k, v in target.options.items() if k.startswith("socket_")},
            "retry": _ha_retry(), **tls, **target.sentinel_options})
        assert target.master is not None
        return sentinels.master_for(target.master, decode_responses=True,
                                    connection_class=_with_hiredis_packing(connection),
                                    retry=_ha_retry(), **target.options)
    return ClusterClient(target)


class ClusterClient(RedisCluster):
    """A ``RedisCluster`` (it routes each command by its key's slot) that also hands out a
    plain client of one node (:meth:`node`): redis-py's cluster pipelines cannot WATCH
    without blocking the event loop (each command of a cluster transaction runs in a thread
    of its own), so a shard's transactions and pipelines run on its master's own client
    (:mod:`.topology`)."""

    def __init__(self, target: RedisTarget) -> None:
        self.target = target
        try:
            super().__init__(startup_nodes=[ClusterNode(h, p) for h, p in target.hosts],
                             decode_responses=True, ssl=target.tls, retry=_ha_retry(),
                             **target.options)
        except TypeError as exc:
            raise ValueError(f"a Redis Cluster URL option is not known: {exc}") from None
        packing = _with_hiredis_packing(SSLConnection if target.tls else Connection)
        self.connection_kwargs["connection_class"] = packing
        self._nodes: dict[tuple[str, int], aioredis.Redis] = {}

    async def initialize(self, *args: Any, **kwargs: Any) -> ClusterClient:  # type: ignore[override]
        """Read the cluster's slots (once); ``ConnectionError`` if no seed node answers
        (redis-py raises a bare ``RedisClusterException``)."""
        try:
            await super().initialize(*args, **kwargs)
        except RedisClusterException as exc:
            if type(exc) is not RedisClusterException:
                raise
            raise ConnectionError(f"no node of the Redis Cluster answers: {exc}") from exc
        return self

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        # Read the slots before routing: redis-py 8.1 routes a command before it reads
        # them, and commands sent at once to a client that never ran one fail with
        # AttributeError (a connection closed under them) about one time in three.
        if self._initialize:
            await self.initialize()
        return await super().execute_command(*args, **kwargs)

    def node(self, host: str, port: int) -> aioredis.Redis:
        """A client of the node at ``host:port`` (made once, reused)."""
        client = self._nodes.get((host, port))
        if client is None:
            client = aioredis.Redis(host=host, port=port, decode_responses=True,
                                    ssl=self.target.tls, retry=_ha_retry(),
                                    **self.target.options)
            pool = client.connection_pool
            pool.connection_class = _with_hiredis_packing(pool.connection_class)
            self._nodes[(host, port)] = client
        return client

    async def aclose(self) -> None:
        """Close every connection (redis-py also calls this to start afresh after a
        failover: the node clients stay usable and connect again when next used)."""
        for client in self._nodes.values():
            await client.aclose()
        await super().aclose()
