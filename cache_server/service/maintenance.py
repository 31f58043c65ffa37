"""Offline maintenance of a data directory and its index: ``gc`` and ``reindex``.

Both run on a cache opened with :func:`cache_server.runtime.open_cache`: with the embedded
Redis under the data directory's lock (only while no server uses the directory); with a
shared Redis beside running replicas, ``gc`` under the maintenance lease (one at a time,
never beside another replica's eviction), taking each digest's lock before it deletes or
rewrites an object, so a store in progress on a replica is never undone.

- :func:`collect_garbage` sweeps interrupted writes, drops manifests whose object is gone
  (or, with ``verify``, corrupt), deletes objects no manifest references, makes every
  sidecar list exactly the entries that reference it (so a later reindex restores exactly
  the index), recounts the byte totals and enforces ``max_bytes``.
- :func:`reindex` adds to the index every entry the sidecars list (pins included) that it
  does not hold yet. It never deletes anything, so it is safe to run on a healthy index.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from anyio import to_thread

from cache_server.models import Manifest
from cache_server.service.cache import ResultCache
from cache_server.service.upload import manifest_for
from storage import CorruptObject, ObjectNotFound, ObjectStore, TaskReference

__all__ = ["GcReport", "ReindexReport", "collect_garbage", "reindex"]


@dataclass
class GcReport:
    temporary_removed: int = 0
    dangling_entries_removed: int = 0
    corrupt_objects_removed: int = 0
    orphan_objects_removed: int = 0
    sidecars_repaired: int = 0
    expired_removed: int = 0
    evicted: int = 0
    entries: int = 0
    stored_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass
class ReindexReport:
    objects: int = 0
    entries_added: int = 0
    already_indexed: int = 0
    unreadable_objects: int = 0
    entries: int = 0
    stored_bytes: int = 0

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


async def collect_garbage(cache: ResultCache, *, verify: bool = False) -> GcReport:
    """Make index and storage agree, then enforce the cap (see the module docstring).

    ``verify=True`` reads every object and checks its digest (a full read of the cache).
    Call inside :func:`cache_server.runtime.open_cache`.
    """
    async with cache.maintenance.hold(wait=0):
        return await _collect_garbage(cache, verify)


async def _collect_garbage(cache: ResultCache, verify: bool) -> GcReport:
    index, storage = cache.index, cache.storage
    report = GcReport(temporary_removed=await cache.remove_leftovers())
    while removed := await cache.remove_expired():
        report.expired_removed += removed
    referenced: dict[str, list[Manifest]] = {}
    async for hashes in index.all_hashes():
        for manifest in await index.manifests(hashes):
            if manifest is not None:
                referenced.setdefault(manifest.digest, []).append(manifest)
    for digest, manifests in referenced.items():
        problem = await to_thread.run_sync(_object_problem, storage, digest, verify)
        if problem is None:
            continue
        for manifest in manifests:
            await index.remove(manifest.hash, reason="corrupt")
            report.dangling_entries_removed += 1
        if problem == "corrupt":
            await to_thread.run_sync(storage.delete, digest)
            report.corrupt_objects_removed += 1
    for digest in await to_thread.run_sync(lambda: list(storage.digests())):
        async with cache.locks.hold(digest):  # a replica may be storing it right now
            refs = await index.references(digest)
            if not refs:
                if await cache.locks.readers(digest):
                    continue  # a download of a replaced object: the next gc removes it
                if await to_thread.run_sync(storage.delete, digest):
                    report.orphan_objects_removed += 1
                continue
            manifests = await index.manifests(sorted(refs))
            try:
                if await to_thread.run_sync(_repair_sidecar, storage, digest,
                                            [m for m in manifests if m is not None]):
                    report.sidecars_repaired += 1
            except (CorruptObject, ObjectNotFound):
                pass  # removed meanwhile: reads decide
    await index.recount()
    report.evicted = await cache.enforce_cap()
    stats = await index.stats()
    report.entries, report.stored_bytes = stats.entries, stats.stored_bytes
    return report


async def reindex(cache: ResultCache, *, verify: bool = False) -> ReindexReport:
    """Index every entry the sidecars list and the index lacks (pins kept; hit counts and
    access times start afresh at each entry's creation). Never deletes anything."""
    index, storage = cache.index, cache.storage
    report = ReindexReport()
    for digest in await to_thread.run_sync(lambda: list(storage.digests())):
        try:
            sidecar = await to_thread.run_sync(storage.sidecar, digest)
            if verify:
                await to_thread.run_sync(storage.get, digest)
        except (CorruptObject, ObjectNotFound):
            report.unreadable_objects += 1
            continue
        report.objects += 1
        for task in sidecar.tasks.values():
            _, added = await index.add(manifest_for(sidecar, task), record=False)
            if added:
                report.entries_added += 1
            else:
                report.already_indexed += 1
    await index.recount()
    stats = await index.stats()
    report.entries, report.stored_bytes = stats.entries, stats.stored_bytes
    return report


def _object_problem(storage: ObjectStore, digest: str, verify: bool) -> str | None:
    """None if the object is fine, ``missing`` or ``corrupt`` otherwise."""
    try:
        if verify:
            storage.get(digest)
        else:
            storage.sidecar(digest)
    except ObjectNotFound:
        return "missing"
    except CorruptObject:
        return "corrupt"
    return None


def _repair_sidecar(storage: ObjectStore, digest: str, manifests: list[Manifest]) -> bool:
    """Make the sidecar list exactly ``manifests`` (with their pins); True if it changed."""
    sidecar = storage.sidecar(digest)
    wanted = {m.hash: m for m in manifests}
    changed = False
    for task_hash in set(sidecar.tasks) - set(wanted):
        storage.remove_task(digest, task_hash)
        changed = True
    for task_hash, manifest in wanted.items():
        listed = sidecar.tasks.get(task_hash)
        if listed is None:
            reference = TaskReference(
                task_hash, manifest.label, manifest.compute_seconds, manifest.created,
                manifest.pinned, expires=manifest.expires,
            )  # fmt: skip
            storage.add_task(digest, reference)
            changed = True
        elif listed.pinned != manifest.pinned:
            storage.set_pinned(digest, task_hash, manifest.pinned)
            changed = True
    return changed
