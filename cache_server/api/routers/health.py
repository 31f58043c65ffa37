"""``GET /healthz`` and ``GET /metrics``."""

from __future__ import annotations

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cache_server.api.auth import ReadAccess
from cache_server.api.dependencies import CacheDep, MetricsDep
from cache_server.api.responses import errors
from cache_server.models import Health

__all__ = ["router"]

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz(cache: CacheDep) -> Health:
    await cache.check_health()
    return Health(status="ok")


@router.get(
    "/metrics", response_class=Response, dependencies=[ReadAccess], responses=errors(401)
)
async def metrics(metrics: MetricsDep) -> Response:
    """Prometheus text format (a read token, when the server has tokens)."""
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
