"""The transport a run uses, as an interface: what the user's process and the tasks ask of
a cache (docs/protocol.md), whatever carries it. :class:`~.client.CacheClient` is the HTTP
implementation; the test suite's in-memory fake (tests/client/_fake_cache.py) is another,
so the pure logic above it (rewrite, policy, budget, leases, the run) is tested without a
server. Every method raises :class:`~client_lib.core.errors.CacheUnavailable` when the
cache cannot be reached and :class:`~client_lib.core.errors.CacheAccessDenied` when it
refuses."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from ..core.signing import SigningKey
from ..wire.codec import Encoded

__all__ = ["Transport"]


class Transport(ABC):
    """A cache, as a run sees it. ``url`` names it in messages; ``signing_key`` keys the
    task hashes and signs the stores (``None``: unsigned)."""

    url: str
    signing_key: SigningKey | None

    # -- the user's process -------------------------------------------------------------

    @abstractmethod
    def lookup(self, hashes: Iterable[str]) -> set[str]:
        """Which of ``hashes`` the cache holds."""

    @abstractmethod
    def entry(self, task_hash: str) -> dict[str, Any] | None:
        """The entry's manifest (``compute_seconds``...), or ``None``."""

    @abstractmethod
    def untrusted_among(self, hashes: Iterable[str]) -> set[str]:
        """Which of ``hashes`` lack a valid signature (reported to the cache)."""

    @abstractmethod
    def report_untrusted(self, task_hash: str) -> None:
        """Tell the cache this entry was not loaded for its signature; never raises."""

    @abstractmethod
    def post_run(self, summary: dict[str, Any]) -> None:
        """Record a run summary (docs/protocol.md, "Runs")."""

    def record_recipes(self, recipes: list[dict[str, Any]]) -> None:
        """Record the recipes of stored entries (docs/design/hashing.md, "Recipes and
        why"); a cache that keeps none ignores them."""
        return None

    def post_run_why(self, run_id: str, why: dict[str, Any]) -> None:
        """Record why a run's tasks were recomputed (``{"reasons", "groups"}``); a cache
        that keeps none ignores it."""
        return None

    def previous_recipes(self, slots: list[str], labels: list[str]
                         ) -> tuple[dict[str, dict[str, Any]], set[str]]:
        """The latest recorded recipe of each slot, and which of ``labels`` have entries
        stored without one. A cache that keeps none: nothing recorded."""
        return {}, set()

    # -- leases -------------------------------------------------------------------------

    @abstractmethod
    def acquire_leases(self, hashes: Iterable[str], holder: str,
                       ttl: float) -> tuple[set[str], set[str], set[str]]:
        """(granted to ``holder``, stored meanwhile, held by another holder)."""

    @abstractmethod
    def renew_leases(self, estimates: dict[str, float | None], holder: str,
                     ttl: float) -> set[str]:
        """The hashes still leased to ``holder`` after extending them by ``ttl``."""

    @abstractmethod
    def release_leases(self, hashes: Iterable[str], holder: str) -> int:
        """Drop ``holder``'s leases of ``hashes``; how many there were."""

    @abstractmethod
    def lease_status(self, task_hash: str) -> dict[str, Any]:
        """``{"leased", "stored", "ttl", "estimate"}`` for one hash."""

    # -- objects ------------------------------------------------------------------------

    @abstractmethod
    def put(self, task_hash: str, value: Any, compute_seconds: float, label: str, *,
            ttl: float | None = None, overwrite: bool = False, run: str | None = None
            ) -> bool:
        """Store ``value`` (or its :class:`Encoded` form); False: no room."""

    @abstractmethod
    def put_many(self, items: list[tuple[str, Encoded, float, str, float | None,
                                         str | None]]) -> list[bool]:
        """Store small encoded values in one request; per item, whether it is held."""

    @abstractmethod
    def get(self, task_hash: str, run: str | None = None) -> Any:
        """The verified value; :class:`~client_lib.core.errors.CacheEntryUnavailable`
        (or a subclass) when it cannot be delivered."""

    @abstractmethod
    def delete(self, task_hash: str) -> bool:
        """Drop the entry; False if there was none."""
