"""JSON bodies of the HTTP API (docs/protocol.md), as pydantic models for validation and /docs."""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from client_lib.wire.bounds import (
    MAX_COMPUTE_SECONDS,
    MAX_LEASE_SECONDS,
    MAX_RECIPE_BATCH,
    MAX_RECIPE_BYTES,
    MAX_RUN_TASKS,
    MIN_LEASE_SECONDS,
)

__all__ = [
    "MAX_COMPUTE_SECONDS",
    "EntryList",
    "Event",
    "EventList",
    "Health",
    "LeaseGrant",
    "LeaseRelease",
    "LeaseRenewal",
    "LeaseRequest",
    "LeaseReturn",
    "LeaseState",
    "LeaseUpdate",
    "LookupRequest",
    "LookupResponse",
    "Manifest",
    "ObjectLocation",
    "PreviousRecipes",
    "PreviousRequest",
    "Recipe",
    "RecipeBatch",
    "RecordedRecipe",
    "RunWhy",
    "StagingPlace",
    "StagingRequest",
    "Stats",
]


# The protocol's bounds (MAX_COMPUTE_SECONDS, lease seconds, MAX_RUN_TASKS) are
# client_lib.wire.bounds': both sides use the one definition.


class LookupRequest(BaseModel):
    # Hash format is checked by the route with one fast loop, not per item by pydantic.
    hashes: list[str]


class LookupResponse(BaseModel):
    found: list[str] = Field(description="the indexed subset, in request order, duplicates once")


class Manifest(BaseModel):
    """What the index knows about one task result."""

    hash: str
    digest: str
    kind: Literal["ndarray", "pickle", "parquet"]
    storage: Literal["zarr", "blob", "parquet"]
    nbytes: int
    dtype: str | None = None
    shape: list[int] | None = None
    type: str | None = None
    compute_seconds: float
    label: str
    created: float
    last_access: float = 0.0
    hits: int = 0
    pinned: bool = Field(default=False, description="pinned entries are never evicted")
    signature: str | None = Field(
        default=None, description="the client's signature (X-Result-Signature), stored opaquely"
    )
    expires: float | None = Field(
        default=None, description="unix time after which the entry is a miss; null: never"
    )


class ObjectLocation(Manifest):
    """A manifest and where its object lies, for direct reads."""

    location: str | None = Field(
        description="URL of the payload for readers that see the server's storage "
        "(file://...: a Zarr array directory, a blob file holding the digest's preimage, "
        "or a Parquet file); null when it cannot be read in place"
    )


class StagingRequest(BaseModel):
    """What a worker is about to stage (``POST /v1/staging``): kind, dtype and shape as in
    the ``X-Result-*`` headers."""

    kind: str
    dtype: str | None = None
    shape: str | None = Field(default=None, max_length=4096)


class StagingPlace(BaseModel):
    """Where to stage it (docs/protocol.md, "Direct writes")."""

    id: str = Field(description="the staging id to commit with (X-Result-Staging)")
    location: str = Field(description="file:// URL of the directory to create and fill")
    layout: str = Field(description="blob, parquet or zarr: which files go there")
    metadata: dict[str, Any] | None = Field(
        description="for zarr: the zarr.json the object will have (its chunk grid and key "
        "encoding name the chunk files)")


class EntryList(BaseModel):
    entries: list[Manifest]
    next_cursor: str | None


class Stats(BaseModel):
    """The cache's counters. A lookup asks for hashes; each is ``found`` or a ``miss``;
    ``served`` counts objects read back (a found hash may be served any number of times,
    or never: its run may fail before the load)."""

    hits: int = Field(description="hashes looked up and found (the same as found)")
    found: int = Field(default=0, description="hashes looked up and found")
    served: int = Field(default=0, description="objects served (successful GETs)")
    misses: int = Field(description="hashes looked up and not found")
    lookups: int
    stores: int
    entries: int
    bytes: int = Field(description="sum of nbytes over indexed entries")
    hit_rate: float = Field(description="found / (found + misses): the hit rate of lookups, "
                            "0 when both are 0")
    saved_seconds: float = Field(description="compute seconds of every object served")
    deletes: int
    corrupt: int
    evictions: int = Field(description="entries evicted to respect max_bytes")
    stored_bytes: int = Field(
        description="sum of nbytes over distinct stored objects (what max_bytes limits)"
    )
    max_bytes: int | None = Field(default=None, description="the size cap; null: none")
    pinned: int = Field(description="pinned entries")
    untrusted: int = Field(
        default=0, description="loads clients refused for a missing or wrong signature"
    )
    expired: int = Field(default=0, description="entries removed because they expired")
    overwrites: int = Field(default=0, description="entries replaced by a refresh")


class Event(BaseModel):
    kind: Literal["store", "hit", "delete", "corrupt", "evict", "untrusted", "expire",
                  "lookup", "run"]
    time: float
    hash: str | None = None
    label: str | None = None
    found: int | None = None
    missing: int | None = None
    run: str | None = Field(default=None, description="a run event's run id")
    status: str | None = Field(default=None, description="a run event's status")
    stored: int | None = Field(default=None, description="a run event's stored count")
    seconds: float | None = Field(default=None, description="a hit's compute seconds saved")


class EventList(BaseModel):
    events: list[Event]


class Health(BaseModel):
    status: Literal["ok"]


# -- leases (docs/protocol.md, "Leases") ----------------------------------------------------

Holder = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                              description="who computes: a run id, 1-64 of [A-Za-z0-9_.-]")]
LeaseSeconds = Annotated[float, Field(ge=MIN_LEASE_SECONDS, le=MAX_LEASE_SECONDS,
                                      description="seconds the lease lives without renewal")]


def _finite_estimate(value: float) -> float:
    if not math.isfinite(value) or not 0 <= value <= 1e7:
        raise ValueError("an estimate must be a finite number of seconds in [0, 1e7]")
    return value


class LeaseRequest(BaseModel):
    holder: Holder
    ttl: LeaseSeconds = 60.0
    hashes: list[str]


class LeaseUpdate(LeaseRequest):
    estimates: dict[str, Annotated[float, AfterValidator(_finite_estimate)]] = Field(
        default_factory=dict, description="hash -> the holder's estimate of its compute time")


class LeaseRelease(BaseModel):
    holder: Holder
    hashes: list[str]


class LeaseGrant(BaseModel):
    granted: list[str] = Field(description="now leased to the holder")
    stored: list[str] = Field(description="stored already: load them")
    held: list[str] = Field(description="leased by another holder: wait for them")


class LeaseRenewal(BaseModel):
    renewed: list[str]
    lost: list[str] = Field(description="stored meanwhile, or another holder's now")


class LeaseReturn(BaseModel):
    released: int


class LeaseState(BaseModel):
    hash: str
    leased: bool
    stored: bool
    ttl: float | None = Field(description="seconds left, null when not leased")
    estimate: float | None = Field(description="the holder's estimate of the compute time")


# -- runs (docs/protocol.md, "Runs") --------------------------------------------------------

#: What the cache did with one task of a run: loaded from the cache, culled (only a loaded
#: task needed it), computed, computed and stored, volatile (never cached, ``reason`` says
#: why), or found but computed anyway (a refresh, an entry that failed to load).
TaskState = Literal["loaded", "culled", "computed", "stored", "volatile", "hit"]
_Text = Annotated[str, Field(max_length=1024)]
_MAX_STORE_LABELS = 256
#: (results, bytes)
_Counted = Annotated[list[Annotated[int, Field(ge=0)]], Field(min_length=2, max_length=2)]


class RunTask(BaseModel):
    key: _Text
    label: _Text = ""
    state: TaskState
    reason: _Text | None = None
    why: _Text | None = Field(default=None, description="why it was recomputed (POST "
                              "/v1/runs/{run_id}/why)")
    deps: list[Annotated[int, Field(ge=0, lt=MAX_RUN_TASKS)]] = Field(
        default_factory=list, max_length=64,
        description="positions in the task list of this task's dependencies (for the graph)")


class RunSummary(BaseModel):
    """What one ``cached_compute`` did, as its client reported it. Posted when the run
    starts (``status`` running, with the task list) and again as it goes and when it ends;
    a later post replaces the counts and keeps the task list it does not resend."""

    run_id: Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
    namespace: _Text = "default"
    host: _Text = ""
    user: _Text = ""
    started: Annotated[float, Field(ge=0, lt=1e11)]
    duration: Annotated[float, Field(ge=0, lt=1e9)] | None = None
    status: Literal["running", "done", "failed"] = "running"
    tasks: Annotated[int, Field(ge=0)] = 0
    scheduled: Annotated[int, Field(ge=0)] = Field(
        default=0, description="tasks the scheduler runs (loads and fused groups count one)")
    done: Annotated[int, Field(ge=0)] = Field(
        default=0, description="of the scheduled tasks, those finished so far")
    hits: Annotated[int, Field(ge=0)] = 0
    loaded: Annotated[int, Field(ge=0)] = 0
    culled: Annotated[int, Field(ge=0)] = 0
    computed: Annotated[int, Field(ge=0)] = 0
    stored: Annotated[int, Field(ge=0)] | None = None
    volatile: Annotated[int, Field(ge=0)] = 0
    untrusted: Annotated[int, Field(ge=0)] = 0
    fallback: _Text | None = None
    seconds_saved: Annotated[float, Field(ge=0)] = Field(
        default=0.0, description="the compute seconds recorded with the entries the run "
        "loaded or culled (the server sums them from saved_hashes; a post without them "
        "keeps the recorded sum)")
    saved_hashes: list[Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]] = Field(
        default_factory=list, max_length=MAX_RUN_TASKS,
        description="task hashes of the entries the run loaded or culled (found by its "
                    "lookup, not recomputed); not kept")
    task_list: list[RunTask] = Field(default_factory=list, max_length=MAX_RUN_TASKS)
    stored_tasks: list[Annotated[int, Field(ge=0, lt=MAX_RUN_TASKS)]] = Field(
        default_factory=list, max_length=MAX_RUN_TASKS,
        description="positions in the recorded task list of the tasks now stored (a post "
                    "that does not resend the list)")
    by_label: dict[_Text, dict[TaskState, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=dict, max_length=MAX_RUN_TASKS,
        description="task counts by label and state (a run too large for a task list)")
    why: list[tuple[_Text, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=list, max_length=100,
        description="why its tasks were recomputed: causes with their task counts (read "
                    "only: POST /v1/runs/{run_id}/why records them)")
    store_outcomes: dict[_Text, dict[_Text, _Counted]] = Field(
        default_factory=dict, max_length=_MAX_STORE_LABELS,
        description="per function (label): how many results, and their bytes, were stored "
                    "or skipped, by reason in a few words (\"stored\", \"cheap\", \"buffer "
                    "full\", ...)")
    store_seconds: Annotated[float, Field(ge=0, lt=1e9)] = Field(
        default=0.0, description="seconds the run's stores took, mostly in the background")
    store_wait: Annotated[float, Field(ge=0, lt=1e9)] = Field(
        default=0.0, description="seconds the run's end waited for its stores")


class RunWhy(BaseModel):
    """Why a run's tasks were recomputed (docs/design/hashing.md, "Recipes and why")."""

    reasons: dict[Annotated[int, Field(ge=0, lt=MAX_RUN_TASKS)], _Text] = Field(
        default_factory=dict, max_length=MAX_RUN_TASKS,
        description="by position in the run's task list")
    groups: list[tuple[_Text, Annotated[int, Field(ge=0)]]] = Field(
        default_factory=list, max_length=100,
        description="causes, with the number of tasks each made recompute")


class RunList(BaseModel):
    runs: list[RunSummary] = Field(description="most recent first, without task lists")


# -- recipes (docs/design/hashing.md, "Recipes and why") ------------------------------------

_Hash = Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]
_Part = Annotated[str, Field(pattern=r"^[0-9a-f]{16}$")]
_Name = Annotated[str, Field(max_length=256)]


def _bounded_recipe(recipe: Recipe) -> Recipe:
    if len(recipe.model_dump_json()) > MAX_RECIPE_BYTES:
        raise ValueError(f"a recipe is at most {MAX_RECIPE_BYTES} bytes of JSON")
    return recipe


class Recipe(BaseModel):
    """What one task hash was made of, by digests (8 bytes as hex) and names only."""

    model_config = {"extra": "forbid"}

    f: list[tuple[_Name, _Part]] = Field(
        default_factory=list, max_length=32,
        description="the function's fingerprint, its body, helpers and globals, by name")
    a: list[tuple[_Name, _Part]] = Field(
        default_factory=list, max_length=32, description="arguments by position or keyword")
    i: list[tuple[_Name, Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]] = Field(
        default_factory=list, max_length=32, description="input files: path, size, mtime (ns)")
    d: list[_Part] = Field(default_factory=list, max_length=256,
                           description="dependencies' task hashes (their first 16 hex)")
    v: list[_Name] = Field(default_factory=list, max_length=8, description="version salts")
    data: _Part | None = Field(default=None, description="a data node: its value's digest")


class RecordedRecipe(BaseModel):
    slot: _Hash
    hash: _Hash
    label: _Name = ""
    recipe: Annotated[Recipe, AfterValidator(_bounded_recipe)]


class RecipeBatch(BaseModel):
    recipes: list[RecordedRecipe] = Field(max_length=MAX_RECIPE_BATCH)


class PreviousRequest(BaseModel):
    slots: list[_Hash] = Field(max_length=MAX_RECIPE_BATCH)
    labels: list[_Name] = Field(
        default_factory=list, max_length=256,
        description="labels to check for entries stored without a recipe")


class PreviousRecipes(BaseModel):
    previous: dict[str, dict[str, Any]] = Field(
        description="by slot: the latest hash stored there (hash), its recipe as stored "
        "(recipe, JSON text), when it was recorded (recorded), when it expires "
        "(expires, null: never) and whether the entry is still held (held)")
    unrecorded: list[str] = Field(
        description="of the labels asked about, those with entries stored without a recipe")
