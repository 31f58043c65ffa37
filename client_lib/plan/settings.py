"""What a run is asked to do, read once: its cache, namespace, store policy, and whether it
may store or must refresh. The arguments of ``cached_compute``, ``cached_persist``,
``CachedClient``, ``plan`` and ``open_cached`` win; config ``result-cache.*``
(client_lib/core/config.py) fills in the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.config import setting
from ..policy.modes import Policy, resolve_policy
from ..transport.client import CacheClient
from ..transport.interface import Transport
from ..transport.signatures import why_no_stores

__all__ = ["NO_CACHE", "RunSettings", "namespace_of", "read_only", "refresh_requested",
           "resolve_cache"]

#: Why a run has no cache when none was given or configured.
NO_CACHE = "no cache configured (set result-cache.url or pass cache=)"


@dataclass(frozen=True)
class RunSettings:
    """``cache`` is ``None`` when the run has none (``problem`` says why); a read-only run
    has the ``none`` policy and never refreshes."""

    cache: Transport | None
    problem: str | None
    namespace: str
    policy: Policy
    read_only: bool
    refresh: bool
    #: Why a run that was not told to be read-only stores nothing (the report says it).
    no_stores_reason: str | None = None

    @classmethod
    def read(cls, cache: Any = None, policy: Any = None, namespace: str | None = None,
             refresh: bool | None = None) -> RunSettings:
        """The settings of a run from its arguments and this process's config. A bad
        argument or setting raises (the caller's error); a malformed cache URL does not:
        it is a cache problem, the run computes without the cache."""
        namespace = namespace_of(namespace)
        no_stores = read_only()
        try:
            client, problem = resolve_cache(cache), None
        except ValueError as exc:
            client, problem = None, str(exc)
        if client is None and problem is None:
            problem = NO_CACHE
        why = why_no_stores(getattr(client, "signing_key", None))
        no_stores = no_stores or why is not None
        refresh = refresh_requested(refresh) and not no_stores
        store_policy = resolve_policy("none" if no_stores else policy)
        return cls(client, problem, namespace, store_policy, no_stores, refresh, why)


def resolve_cache(cache: Any = None) -> Transport | None:
    """A :class:`CacheClient` from a URL or config ``result-cache.url``; a client, or any
    other :class:`~client_lib.transport.interface.Transport`, as it is."""
    if isinstance(cache, Transport):
        return cache
    token = setting("token")
    from_config = cache is None
    if from_config:
        cache = setting("url")
        if not cache:
            return None
    if not isinstance(cache, str):
        raise TypeError(f"cache must be a URL or a CacheClient, not {type(cache).__name__}")
    # A configured URL is re-read from each worker's own config (see CacheClient).
    return CacheClient.shared(cache, token, from_config=from_config)


def namespace_of(namespace: str | None) -> str:
    """``namespace``, or config ``result-cache.namespace``; a string."""
    return _given_or_set(namespace, "namespace", str,
                         lambda v: f"namespace must be a string, not {type(v).__name__}")


def read_only() -> bool:
    """Whether config ``result-cache.mode`` says to load but never store."""
    mode = setting("mode")
    if mode not in ("read-write", "read-only"):
        raise ValueError(f"result-cache.mode must be 'read-write' or 'read-only', not {mode!r}")
    return mode == "read-only"


def refresh_requested(refresh: bool | None) -> bool:
    """``refresh``, or config ``result-cache.refresh`` when it is ``None``."""
    return _given_or_set(refresh, "refresh", bool,
                         lambda v: f"refresh must be True or False, not {v!r}")


def _given_or_set(value: Any, name: str, kind: type, wrong: Callable[[Any], str]) -> Any:
    """``value``, or config ``result-cache.<name>`` when it is ``None``: a ``kind``, else
    ``TypeError(wrong(value))``."""
    if value is None:
        value = setting(name)
    if not isinstance(value, kind):
        raise TypeError(wrong(value))
    return value
