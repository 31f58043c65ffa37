"""Leases as the service offers them (docs/protocol.md, "Leases"): bounded batches over
:class:`~cache_server.index.leases.LeaseStore`, and the status waiters poll."""

from __future__ import annotations

from dataclasses import dataclass

from cache_server.index.leases import LeaseStore
from cache_server.index.redis_index import RedisIndex
from cache_server.service.errors import InvalidLease

__all__ = ["LeaseState", "Leases"]

#: The lease script's digits as the packed route's bytes (b"0" -> 0, ...).
_DIGIT_BYTES = bytes.maketrans(b"012", b"\x00\x01\x02")


@dataclass(frozen=True)
class LeaseState:
    """What a waiter needs: is the hash leased (for how long, how long its task takes
    by its holder's estimate), and is it stored."""

    leased: bool
    stored: bool
    ttl: float | None
    estimate: float | None


class Leases:
    """Take, renew, release and read leases; at most ``max_hashes`` per request (larger
    batches raise :class:`InvalidLease`). Holders and TTLs are validated by the caller."""

    def __init__(self, store: LeaseStore, index: RedisIndex, max_hashes: int) -> None:
        self.store = store
        self.index = index
        self.max_hashes = max_hashes

    def _bounded(self, hashes: list[str]) -> list[str]:
        if len(hashes) > self.max_hashes:
            raise InvalidLease(f"{len(hashes)} hashes in one lease request; the limit is "
                               f"{self.max_hashes}")
        return list(dict.fromkeys(hashes))

    async def acquire(self, hashes: list[str], holder: str,
                      ttl: float) -> tuple[list[str], list[str], list[str]]:
        """(granted, stored, leased by another holder)."""
        return await self.store.acquire(self._bounded(hashes), holder, ttl)

    async def acquire_packed(self, packed: bytes, holder: str, ttl: float) -> bytes:
        """:meth:`acquire` for 32-character hashes sent back to back (validated): one byte
        per hash, in order, 0 granted, 1 stored, 2 leased by another holder."""
        count = len(packed) // 32
        if count > self.max_hashes:
            raise InvalidLease(f"{count} hashes in one lease request; the limit is "
                               f"{self.max_hashes}")
        text = packed.decode("ascii")
        hashes = [text[i:i + 32] for i in range(0, len(text), 32)]
        flags = await self.store.acquire_flags(hashes, holder, ttl)
        return flags.encode("ascii").translate(_DIGIT_BYTES)

    async def renew(self, hashes: list[str], holder: str, ttl: float,
                    estimates: dict[str, float]) -> tuple[list[str], list[str]]:
        """(renewed, lost)."""
        unknown = set(estimates) - set(hashes)
        if unknown:
            raise InvalidLease(f"estimates for hashes not renewed: {sorted(unknown)[:3]}")
        return await self.store.renew(self._bounded(hashes), holder, ttl, estimates)

    async def release(self, hashes: list[str], holder: str) -> int:
        return await self.store.release(self._bounded(hashes), holder)

    async def state(self, task_hash: str) -> LeaseState:
        lease = await self.store.status(task_hash)
        stored = await self.index.contains(task_hash)
        return LeaseState(lease.leased, stored, lease.ttl, lease.estimate)

    async def sweep(self) -> int:
        """Delete expired leases (caller holds the maintenance lease); how many."""
        return await self.store.sweep()

    async def drop(self, *task_hashes: str) -> None:
        """The hashes are stored now: their leases end, whoever held them."""
        await self.store.drop(*task_hashes)
