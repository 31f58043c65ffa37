"""Server settings, from ``RESULT_CACHE_*`` environment variables or keyword arguments.

The prefix is not ``DASK_`` on purpose: server settings must never land in Dask's config.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]


class Settings(BaseSettings):
    """How one cache server runs. Keyword arguments override the environment."""

    model_config = SettingsConfigDict(env_prefix="RESULT_CACHE_", extra="ignore")

    redis_url: str | None = Field(
        default=None,
        description="Redis to use; None starts an embedded redis-server in data_dir/redis",
    )
    redis_prefix: str = Field(
        default="rc:", description="prefix of every Redis key (lets servers share one Redis)"
    )
    data_dir: Path = Field(
        default=Path(".dask-result-cache"), description="objects, and the embedded Redis"
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8780, ge=0, le=65535)
    max_body_bytes: int = Field(
        default=16 * 2**30, gt=0, description="largest object body accepted"
    )
    max_lookup_hashes: int = Field(default=1_000_000, gt=0, description="most hashes in one lookup")
    events_maxlen: int = Field(
        default=10_000, gt=0, description="events kept (approximately) for /v1/events"
    )
