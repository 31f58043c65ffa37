"""``/v1/recipes``: what each stored task hash was made of, for explaining misses
(docs/design/hashing.md, "Recipes and why")."""

from __future__ import annotations

from fastapi import APIRouter

from cache_server.api.auth import WriteAccess
from cache_server.api.dependencies import CacheDep
from cache_server.api.responses import errors
from cache_server.models import PreviousRecipes, PreviousRequest, RecipeBatch

__all__ = ["router"]

router = APIRouter(tags=["recipes"])


@router.post("/v1/recipes", dependencies=[WriteAccess], responses=errors(403))
async def post_recipes(batch: RecipeBatch, cache: CacheDep) -> dict[str, int]:
    """Record the recipes of stored entries, each under its structural slot (the latest
    one wins). Recipes of hashes the index does not hold are dropped."""
    return {"recorded": await cache.record_recipes(batch)}


@router.post("/v1/recipes/previous")
async def previous_recipes(request: PreviousRequest, cache: CacheDep) -> PreviousRecipes:
    """The latest recipe recorded for each slot (a read: ``why`` asks it)."""
    return await cache.previous_recipes(request)
