"""What Dask's ``scheduler`` config holds while the cache is enabled, and the guard that
keeps the cache's own computations plain. docs/design/zero-code.md, Zero code change.

``dask.config.set(scheduler=f)`` is Dask's documented way to run every ``dask.compute`` /
``dask.persist`` that names no scheduler through ``f``: ``dask.base.get_scheduler`` returns
it ahead of a default client and the collections' defaults. The cache then needs the
scheduler Dask would have chosen without it (:meth:`SchedulerHook.dask_choice`), and must
never route a computation it started itself (:func:`plain_dask`). The routing proper is
``client_lib.routing``'s; this module imports nothing of the cache, so the modules below
the entry points (``plan.schedulers``, ``plan.materialize``) can use it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import dask.config
from dask.base import get_scheduler

__all__ = ["SchedulerHook", "plain_dask", "routing_allowed"]

_plain: ContextVar[bool] = ContextVar("result_cache_plain_dask", default=False)


@contextmanager
def plain_dask() -> Iterator[None]:
    """Inside the block (this thread or task), Dask's entry points compute as plain Dask
    even while the cache is enabled: the cache's own steps (materialising, running the
    rewritten graph, submitting to a cluster) are never routed a second time."""
    token = _plain.set(True)
    try:
        yield
    finally:
        _plain.reset(token)


def routing_allowed() -> bool:
    """False inside :func:`plain_dask`."""
    return not _plain.get()


class SchedulerHook:
    """The callable ``client_lib.enable`` puts in Dask's ``scheduler`` config (subclassed
    by ``client_lib.routing``). ``previous`` is the config value it replaced.

    A copy of the config sent to another process (a nanny hands its worker the
    configuration, pickled) holds ``None`` in its place: the hook belongs to the process
    that enabled the cache.
    """

    def __init__(self, previous: Any) -> None:
        while isinstance(previous, SchedulerHook):  # an earlier hook is never the choice
            previous = previous.previous
        self.previous = previous

    def __reduce__(self) -> tuple:
        return (type(None), ())

    def __call__(self, dsk: Any, keys: Sequence, **kwargs: Any) -> Any:
        schedule = self.dask_choice()
        if schedule is None:
            raise ValueError("no scheduler for this computation")
        return schedule(dsk, keys, **kwargs)

    def dask_choice(self, collections: Sequence[Any] = ()) -> Callable | None:
        """The scheduler ``dask.base.get_scheduler`` would return without this hook, in
        its order: the scheduler configured before, a default ``distributed`` client, the
        collections' own default (``None`` when no collection says). Raises what Dask
        raises (an asynchronous client, collections with differing defaults)."""
        if self.previous:
            return get_scheduler(scheduler=self.previous)
        # A client exists only once distributed was imported, or through the address a
        # get_client() connects to; never imported here otherwise (~0.3 s).
        if "distributed" in sys.modules or dask.config.get("scheduler-address", None):
            try:
                from distributed import get_client

                client = get_client()
            except (ImportError, ValueError):
                pass
            else:
                return get_scheduler(scheduler=client)
        defaults = [c.__dask_scheduler__ for c in collections if c is not None]
        if not defaults:
            return None
        if any(d != defaults[0] for d in defaults):
            raise ValueError("Compute called on multiple collections with differing default "
                             "schedulers. Please specify a scheduler=` parameter explicitly "
                             "in compute or globally with `dask.config.set`.")
        return defaults[0]
