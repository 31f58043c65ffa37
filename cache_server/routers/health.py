"""``GET /healthz`` and ``GET /metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from redis.exceptions import RedisError

from cache_server.auth import ReadAccess
from cache_server.dependencies import IndexDep, MetricsDep
from cache_server.errors import ServiceUnavailable
from cache_server.models import Health
from cache_server.responses import errors

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(index: IndexDep) -> Health:
    try:
        await index.ping()
    except (RedisError, OSError) as exc:
        raise ServiceUnavailable(f"the index (Redis) is unreachable: {exc}") from exc
    return Health(status="ok")


@router.get(
    "/metrics", response_class=Response, dependencies=[ReadAccess], responses=errors(401)
)
async def metrics(metrics: MetricsDep) -> Response:
    """Prometheus text format (a read token, when the server has tokens)."""
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
