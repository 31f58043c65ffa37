"""Server settings, from ``RESULT_CACHE_*`` environment variables or keyword arguments.

The prefix is not ``DASK_`` on purpose: server settings must never land in Dask's config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from cache_server.index.client import parse_redis_url
from cache_server.service.budget import DEFAULT_BODY_MEMORY
from client_lib.wire.bounds import (
    LEASE_BATCH,
    MAX_COMPUTE_SECONDS,
    MAX_LEASE_SECONDS,
    MAX_RUN_BYTES,
    MIN_LEASE_SECONDS,
)
from storage import storage_url_problem

__all__ = ["Settings", "parse_size"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}  # fmt: skip
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any) -> Any:
    """A size with an optional unit -> bytes: ``"500MB"``, ``"2GiB"``, ``"1.5GB"``, ``"1048576"``.

    Anything else is returned unchanged for pydantic to refuse with its own message;
    ``""`` and ``None`` mean "not set".
    """
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, str):
        if not value.strip():
            return None
        match = _SIZE.match(value)
        if match and match.group(2).lower() in _UNITS:
            return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    return value


ByteSize = Annotated[int | None, BeforeValidator(parse_size)]


def _blank_is_none(value: Any) -> Any:
    """An empty environment variable means "not set"."""
    return None if isinstance(value, str) and not value.strip() else value


class Settings(BaseSettings):
    """How one cache server runs. Keyword arguments override the environment."""

    # Inputs stay out of error messages: a Redis URL or a token may hold a secret.
    model_config = SettingsConfigDict(env_prefix="RESULT_CACHE_", extra="ignore",
                                      hide_input_in_errors=True)

    @field_validator("storage_url")
    @classmethod
    def _known_storage(cls, url: str | None) -> str | None:
        if url is None or not url.strip():
            return None
        problem = storage_url_problem(url.strip())
        if problem is not None:
            raise ValueError(problem)
        return url.strip()

    def objects_url(self) -> str:
        """The storage URL in effect."""
        return self.storage_url or (self.data_dir.resolve() / "objects").as_uri()

    @field_validator("redis_url")
    @classmethod
    def _known_redis(cls, url: str | None) -> str | None:
        if url is None or not url.strip():
            return None
        parse_redis_url(url.strip())  # ValueError: what is wrong with it
        return url.strip()

    @model_validator(mode="after")
    def _cluster_prefix(self) -> Settings:
        if self.redis_url and parse_redis_url(self.redis_url).kind == "cluster" and (
                "{" in self.redis_prefix or "}" in self.redis_prefix):
            raise ValueError(f"redis_prefix {self.redis_prefix!r}: a Redis Cluster's key "
                             "prefix must not contain braces (they name hash slots)")
        return self

    redis_url: str | None = Field(
        default=None,
        description="Redis to use: redis://host:port/db (rediss:// for TLS, unix:///path), "
        "redis+sentinel://host:port,host:port,.../<master> (the primary Sentinel names, "
        "found again after a failover), redis+cluster://host:port,... (a Redis Cluster: "
        "the index sharded over its masters); None starts an embedded redis-server in "
        "data_dir/redis",
    )
    redis_prefix: str = Field(
        default="rc:", description="prefix of every Redis key (lets servers share one Redis)"
    )
    redis_min_replicas: Annotated[int | None, BeforeValidator(_blank_is_none)] = Field(
        default=None, ge=0,
        description="replicas a store waits for (Redis WAIT) before it is acknowledged; "
        "None: one when the primary has replicas, none otherwise; 0: never wait",
    )
    redis_replica_timeout: float = Field(
        default=1.0, gt=0,
        description="seconds a store waits for its replicas; beyond, it is answered 503 "
        "with Retry-After (the entry stays on the primary; a retry waits again)",
    )
    data_dir: Path = Field(
        default=Path(".dask-result-cache"), description="objects, and the embedded Redis"
    )
    storage_url: str | None = Field(
        default=None,
        description="where objects live: file:///path or s3://bucket/prefix (credentials and "
        "endpoint from the AWS_* variables); None: file://<data_dir>/objects",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8780, ge=0, le=65535)
    max_body_bytes: int = Field(
        default=16 * 2**30, gt=0, description="largest object body accepted"
    )
    max_uploads: int = Field(
        default=64, gt=0,
        description="uploads in flight at once; more are answered 503 with Retry-After",
    )
    body_timeout: float = Field(
        default=30.0, gt=0,
        description="seconds an upload may send nothing before it is aborted (408)",
    )
    max_body_memory: Annotated[int, BeforeValidator(parse_size)] = Field(
        default=DEFAULT_BODY_MEMORY, gt=0,
        description="memory the object bodies in flight may hold together: downloads (each "
        "holds at most a storage chunk and a piece) and batches (their size); beyond it 503",
    )
    zero_copy_min_bytes: Annotated[int, BeforeValidator(parse_size)] = Field(
        default=16 * 2**20, ge=0,
        description="object bodies this large are sent from their files with sendfile, "
        "unread and unverified by the server (the client verifies and reports a mismatch); "
        "smaller ones are verified before they are sent",
    )
    max_lookup_hashes: int = Field(default=1_000_000, gt=0, description="most hashes in one lookup")
    max_lease_hashes: int = Field(
        default=LEASE_BATCH, gt=0, description="most hashes in one lease request"
    )
    max_lease_ttl: float = Field(
        default=600.0, ge=MIN_LEASE_SECONDS, le=MAX_LEASE_SECONDS,
        description="longest lease granted without renewal (a longer TTL asked is cut to it)",
    )
    max_lease_estimate: float = Field(
        default=3600.0, ge=0, le=MAX_COMPUTE_SECONDS,
        description="largest compute-time estimate a lease records (a holder's word, shown "
        "to waiters; larger ones are cut to it)",
    )
    max_leases: int = Field(
        default=1_000_000, gt=0,
        description="outstanding leases in all (~150 bytes of Redis each); a request that "
        "could pass it is answered 429",
    )
    max_client_leases: int = Field(
        default=200_000, gt=0,
        description="outstanding leases per client (its token, or its address without "
        "tokens); a request that could pass it is answered 429",
    )
    max_run_bytes: Annotated[int, BeforeValidator(parse_size)] = Field(
        default=MAX_RUN_BYTES, gt=0,
        description="largest run summary as stored (its task list); larger posts are "
        "answered 413",
    )
    max_runs_bytes: Annotated[int, BeforeValidator(parse_size)] = Field(
        default=128 * 2**20, gt=0,
        description="run summaries kept in all (besides the last 1000): the oldest go first",
    )
    redis_max_memory: Annotated[int, BeforeValidator(parse_size)] = Field(
        default=2 * 2**30, gt=0,
        description="the embedded Redis's maxmemory, with noeviction: beyond it writes are "
        "answered 507 and no index entry is ever evicted (an external Redis keeps its own)",
    )
    events_maxlen: int = Field(
        default=10_000, gt=0, description="events kept (approximately) for /v1/events"
    )
    max_json_bytes: int = Field(
        default=64 * 2**20, gt=0, description="largest JSON request body (a lookup)"
    )
    max_header_bytes: int = Field(
        default=64 * 2**10,
        ge=4096,
        description="largest request line and headers (431 beyond; a label takes up to 12 KiB)",
    )
    head_timeout: float = Field(
        default=10.0, gt=0,
        description="seconds a connection may take to send a request head (from opening or "
        "from its previous response) before it is closed",
    )
    max_connections: int = Field(
        default=0, ge=0,
        description="open connections per server process; beyond it the oldest one still "
        "sending its head is closed (0: the soft open-files limit less 128)",
    )
    tokens: str | None = Field(
        default=None,
        description="bearer tokens as comma-separated scope:token pairs, "
        "e.g. 'read:tok1,write:tok2'; none: no authentication (a warning at start)",
    )
    tokens_file: Path | None = Field(
        default=None, description="a file of scope:token lines (# comments), added to tokens"
    )
    token_failures_allowed: int = Field(
        default=10, gt=0,
        description="wrong tokens one client address may send before it is answered 429 "
        "(for a time that doubles with each further failure)",
    )
    session_seconds: float = Field(
        default=8 * 3600.0, gt=0,
        description="how long a dashboard sign-in lasts (the browser then signs in again)",
    )
    allow_open: bool = Field(
        default=False,
        description="serve without tokens on an address beyond loopback (refused otherwise)",
    )
    published_host: str | None = Field(
        default=None,
        description="the host address this server's port is published on, when that is not "
        "where it binds (a container binds 0.0.0.0); the start-up token check looks at it",
    )
    max_bytes: ByteSize = Field(
        default=None,
        gt=0,
        description="cap on stored object bytes (e.g. 500GB, 64MiB); None: unbounded",
    )
    eviction_half_life: float = Field(
        default=86_400.0,
        gt=0,
        description="seconds after which an unused entry's eviction score halves",
    )
