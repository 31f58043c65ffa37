"""Leases as the service offers them (docs/protocol.md, "Leases"): bounded batches over
:class:`~cache_server.index.leases.LeaseStore`, and the status waiters poll.

Everything a writer says about a lease is bounded here, since a waiter's wait and Redis's
memory follow from it: a TTL is cut to ``max_ttl`` and an estimate to ``max_estimate``
(the status reports the bounded figures), and the leases outstanding are bounded in all
and per client (:class:`LeaseBounds`; :class:`TooManyLeases` beyond)."""

from __future__ import annotations

from dataclasses import dataclass

from cache_server.index.leases import LeaseBound, LeaseStore
from cache_server.index.redis_index import RedisIndex
from cache_server.service.errors import InvalidLease, TooManyLeases

__all__ = ["LeaseBounds", "LeaseState", "Leases"]


@dataclass(frozen=True)
class LeaseBounds:
    """What a writer's lease requests may claim (the server's settings ``max_lease_ttl``,
    ``max_lease_estimate``, ``max_leases``, ``max_client_leases``)."""

    max_ttl: float = 600.0
    max_estimate: float = 3600.0
    max_leases: int = 1_000_000
    max_client_leases: int = 200_000

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

    def __init__(self, store: LeaseStore, index: RedisIndex, max_hashes: int,
                 bounds: LeaseBounds | None = None) -> None:
        self.store = store
        self.index = index
        self.max_hashes = max_hashes
        self.bounds = bounds or LeaseBounds()

    def _bounded(self, hashes: list[str]) -> list[str]:
        if len(hashes) > self.max_hashes:
            raise InvalidLease(f"{len(hashes)} hashes in one lease request; the limit is "
                               f"{self.max_hashes}")
        return list(dict.fromkeys(hashes))

    async def acquire(self, hashes: list[str], holder: str, ttl: float,
                      client: str = "") -> tuple[list[str], list[str], list[str]]:
        """(granted, stored, leased by another holder); ``ttl`` cut to ``max_ttl``.
        ``client``: who asks (a token's or an address's short digest), whose quota the new
        leases count in. :class:`TooManyLeases` beyond a bound (after one sweep of
        expired leases, for the bound in all)."""
        hashes = self._bounded(hashes)
        flags = await self._flags(hashes, holder, ttl, client)
        out: dict[str, list[str]] = {"0": [], "1": [], "2": []}
        for task_hash, flag in zip(hashes, flags, strict=True):
            out[flag].append(task_hash)
        return out["0"], out["1"], out["2"]

    async def _flags(self, hashes: list[str], holder: str, ttl: float, client: str) -> str:
        """The lease script's digits, within the bounds (see :meth:`acquire`)."""
        ttl = min(ttl, self.bounds.max_ttl)
        for attempt in (1, 2):
            try:
                return await self.store.acquire_flags(hashes, holder, ttl, client)
            except LeaseBound as exc:
                if exc.which == "total" and attempt == 1 and await self.store.sweep():
                    continue
                raise TooManyLeases(self._refusal(exc, len(hashes))) from None
        raise AssertionError("unreachable")

    @staticmethod
    def _refusal(exc: LeaseBound, n: int) -> str:
        if exc.which == "total":
            return (f"{n} more leases would pass the server's bound on outstanding leases "
                    f"(max_leases {exc.limit}); retry later or compute without leases")
        return (f"{n} more leases would pass this client's bound on outstanding leases "
                f"(max_client_leases {exc.limit}); release leases or retry later")

    async def acquire_packed(self, packed: bytes, holder: str, ttl: float,
                             client: str = "") -> bytes:
        """:meth:`acquire` for 32-character hashes sent back to back (validated): one byte
        per hash, in order, 0 granted, 1 stored, 2 leased by another holder."""
        count = len(packed) // 32
        if count > self.max_hashes:
            raise InvalidLease(f"{count} hashes in one lease request; the limit is "
                               f"{self.max_hashes}")
        text = packed.decode("ascii")
        hashes = [text[i:i + 32] for i in range(0, len(text), 32)]
        flags = await self._flags(hashes, holder, ttl, client)
        return flags.encode("ascii").translate(_DIGIT_BYTES)

    async def renew(self, hashes: list[str], holder: str, ttl: float,
                    estimates: dict[str, float], client: str = ""
                    ) -> tuple[list[str], list[str]]:
        """(renewed, lost); ``ttl`` cut to ``max_ttl``, estimates to ``max_estimate``."""
        unknown = set(estimates) - set(hashes)
        if unknown:
            raise InvalidLease(f"estimates for hashes not renewed: {sorted(unknown)[:3]}")
        most = self.bounds.max_estimate
        estimates = {h: min(seconds, most) for h, seconds in estimates.items()}
        return await self.store.renew(self._bounded(hashes), holder,
                                      min(ttl, self.bounds.max_ttl), estimates, client)

    async def release(self, hashes: list[str], holder: str, client: str = "") -> int:
        return await self.store.release(self._bounded(hashes), holder, client)

    async def state(self, task_hash: str) -> LeaseState:
        lease = await self.store.status(task_hash)
        stored = await self.index.contains(task_hash)
        estimate = lease.estimate
        if estimate is not None:  # recorded under an older, larger bound
            estimate = min(estimate, self.bounds.max_estimate)
        return LeaseState(lease.leased, stored, lease.ttl, estimate)

    async def sweep(self) -> int:
        """Delete expired leases (caller holds the maintenance lease); how many."""
        return await self.store.sweep()

    async def drop(self, *task_hashes: str) -> None:
        """The hashes are stored now: their leases end, whoever held them."""
        await self.store.drop(*task_hashes)
