"""``/v1/runs``: what each ``cached_compute`` did, as its client reports it
(docs/protocol.md, "Runs"); the dashboard's runs list and run pages read these."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Path, Query

from cache_server.api.auth import WriteAccess
from cache_server.api.dependencies import CacheDep
from cache_server.api.responses import errors
from cache_server.models import RunList, RunSummary, RunWhy
from client_lib.wire import headers as result_headers

__all__ = ["RunHeader", "RunId", "router"]

router = APIRouter(tags=["runs"])

RunId = Annotated[str, Path(pattern=r"^[0-9a-f]{32}$", description="32 lowercase hex")]
#: ``X-Result-Run`` on loads and stores: the run they belong to (their event names it).
RunHeader = Annotated[str | None, Header(
    alias=result_headers.RUN, pattern=r"^[0-9a-f]{32}$",
    description="the id of the run this load or store belongs to (its event names it)")]


@router.post("/v1/runs", dependencies=[WriteAccess], responses=errors(403))
async def post_run(run: RunSummary, cache: CacheDep) -> RunSummary:
    """Record a run's summary: at its start (with its task list), as it progresses and at
    its end. A post without a task list keeps the one recorded."""
    return await cache.record_run(run)


@router.post("/v1/runs/{run_id}/why", dependencies=[WriteAccess], responses=errors(403))
async def post_run_why(run_id: RunId, why: RunWhy, cache: CacheDep) -> dict[str, int]:
    """Record why the run's tasks were recomputed (its client posts it after the run, from
    the recipes recorded before it: docs/design/hashing.md, "Recipes and why")."""
    await cache.record_run_why(run_id, why)
    return {"reasons": len(why.reasons)}


@router.get("/v1/runs", response_model_exclude={"runs": {"__all__": {"task_list", "by_label"}}})
async def list_runs(cache: CacheDep,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 50) -> RunList:
    """The most recent runs, newest first (the server keeps the last 1000)."""
    return RunList(runs=await cache.recent_runs(limit))


@router.get("/v1/runs/{run_id}", responses=errors(404))
async def get_run(run_id: RunId, cache: CacheDep) -> RunSummary:
    """One run with its task list."""
    return await cache.run(run_id)
