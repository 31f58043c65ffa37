"""What Dask's entry points do while the cache is enabled (``client_lib.routing``):
docs/design/zero-code.md, Zero code change.

:class:`Router` is what Dask's ``scheduler`` config holds: it hands the expression
``dask.compute`` built to ``cached_compute`` as a
:class:`~client_lib.plan.materialize.Prebuilt`, on the scheduler Dask would have chosen
without it, and takes ``dask.persist``'s collections through Dask's protocol for a
scheduler with a ``persist`` method. :func:`wrap_client` puts wrappers in place of
``distributed.Client``'s ``compute``, ``persist`` and ``get`` (the same steps as
``CachedClient``'s: ``cached_compute`` / ``cached_persist`` with the client as scheduler),
and of ``submit`` and ``map``, which stay plain and say so once. Every one of them is
plain Dask while no options are :func:`activate`-d, and inside
:func:`~client_lib.plan.scheduler_hook.plain_dask` (the cache's own calls).

Computed as plain Dask, said once: ``Client.submit`` / ``map``, a graph handed to a
scheduler directly (``compute_as_if_collection``, ``Client.get`` with a graph), an
asynchronous client, and a compute keyword named like an option of the cache
(``x.compute(cache=...)`` is the local schedulers' own ``cache`` argument).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import dask
from dask.core import flatten

from .compute import cached_compute
from .core.notices import warn_once
from .persist import cached_persist
from .plan.materialize import Prebuilt
from .plan.scheduler_hook import SchedulerHook, plain_dask, routing_allowed

__all__ = ["OPTIONS", "Router", "activate", "deactivate", "unwrap_client", "wrap_client"]

#: The keyword options of ``cached_compute`` that ``client_lib.enable`` takes.
OPTIONS = ("cache", "policy", "namespace", "explain", "refresh")
_CLIENT_METHODS = ("compute", "persist", "get", "submit", "map")
_CLIENT_GET_OPTIONS = ("workers", "allow_other_workers", "resources", "retries", "priority",
                       "fifo_timeout", "actors")

_active: dict[str, Any] | None = None  # the options of routed calls; None: plain Dask
# distributed.Client's functions while they are wrapped: name -> (original, wrapper)
_wrapped: dict[str, tuple[Any, Any]] = {}


def activate(options: dict[str, Any]) -> None:
    """Route calls with these options (``cached_compute``'s keywords, checked)."""
    global _active
    _active = dict(options)


def deactivate() -> None:
    global _active
    _active = None


def _options() -> dict[str, Any] | None:
    """The options of a call to route, or ``None``: disabled, or the cache's own call."""
    options = _active
    if options is None or not routing_allowed():
        return None
    return options


def _say_once(what: str) -> None:
    warn_once(f"client_lib.enable: {what}: computed as plain Dask, without the result cache",
              key=f"routing: {what}", user_warning=True, stacklevel=4)


def _colliding(kwargs: dict[str, Any], where: str) -> bool:
    names = sorted(set(kwargs) & {*OPTIONS, "scheduler", "traverse", "optimize_graph"})
    if names:
        _say_once(f"{where} with {', '.join(f'{n}=' for n in names)} (Dask's own arguments "
                  "there)")
    return bool(names)


def _expression_outputs(dsk: Any, keys: Sequence, where: str) -> list | None:
    """``cached_compute``'s collections for what ``dask.compute`` handed a scheduler: the
    expression it built, asked for its own output keys; ``None`` for anything else."""
    from dask._expr import Expr

    if isinstance(dsk, Expr) and isinstance(keys, list | tuple):
        keys = list(keys)
        if keys and keys == list(flatten(dsk.__dask_keys__())):
            return Prebuilt(dsk, keys).outputs()
    _say_once(f"a graph handed to {where} directly (not through dask.compute, e.g. "
              "compute_as_if_collection)")
    return None


class Router(SchedulerHook):
    """What Dask's ``scheduler`` config holds while enabled (a copy pickled for another
    process is ``None``: :class:`~client_lib.plan.scheduler_hook.SchedulerHook`)."""

    def __call__(self, dsk: Any, keys: Sequence, **kwargs: Any) -> Any:
        schedule = self.dask_choice() or _collections_default(dsk)
        options = _options()
        if options is not None and not _colliding(kwargs, "dask.compute"):
            outputs = _expression_outputs(dsk, keys, "the scheduler")
            if outputs is not None:
                with plain_dask():
                    return cached_compute(*outputs, scheduler=schedule, traverse=False,
                                          **options, **kwargs)
        with plain_dask():
            return schedule(dsk, keys, **kwargs)

    def persist(self, collections: list, optimize_graph: bool = True, **kwargs: Any) -> list:
        """Dask's protocol: ``dask.persist`` hands a scheduler that has a ``persist`` method
        the collections (returns the persisted ones, in order)."""
        schedule = self.dask_choice(collections)
        options = _options()
        with plain_dask():
            if options is not None and not _colliding(kwargs, "dask.persist"):
                return list(cached_persist(*collections, scheduler=schedule,
                                           optimize_graph=optimize_graph, **options,
                                           **kwargs))
            return list(dask.persist(*collections, scheduler=schedule, traverse=False,
                                     optimize_graph=optimize_graph, **kwargs))


def _collections_default(expr: Any) -> Callable:
    """The default scheduler of the collections behind an expression ``dask.compute``
    built (Dask hands a configured scheduler the expression, not the collections):
    processes for bags, whose finalisation functions come from ``dask.bag``, threads for
    every other collection of Dask's."""
    import dask.multiprocessing
    import dask.threaded

    for node in (expr, *getattr(expr, "operands", ())):
        if "postcompute" not in getattr(type(node), "_parameters", ()):
            continue
        post = node.operand("postcompute")
        for item in post if isinstance(post, list) else [post]:
            func = item[0] if isinstance(item, tuple) and item else None
            if getattr(func, "__module__", "").startswith("dask.bag"):
                return dask.multiprocessing.get
    return dask.threaded.get


# -- distributed.Client ------------------------------------------------------------------

def _asynchronous(client: Any, where: str) -> bool:
    if getattr(client, "asynchronous", False):
        _say_once(f"{where} on an asynchronous client (cached_compute blocks)")
        return True
    return False


def _bound_if_routed(signature: inspect.Signature, client: Any, args: tuple, kwargs: dict,
            where: str) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The options and the bound arguments of a ``Client`` call to route, else ``None``."""
    options = _options()
    if options is None or _asynchronous(client, where):
        return None
    return options, signature.bind(client, *args, **kwargs).arguments


def _as_list(collections: Any) -> tuple[list, bool]:
    """``Client.compute``'s and ``persist``'s argument as a list; whether it was one item."""
    singleton = not isinstance(collections, list | tuple | set | frozenset)
    return ([collections] if singleton else list(collections)), singleton


def _client_compute(original: Callable) -> Callable:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def compute(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = _bound_if_routed(signature, self, args, kwargs, "Client.compute")
        if bound is None or bound[1].get("kwargs"):  # those: Dask's own error
            return original(self, *args, **kwargs)
        options, given = bound
        items, singleton = _as_list(given["collections"])
        if given.get("traverse", True):  # as Client.compute: one delayed per Python collection
            items = [dask.delayed(a) if isinstance(a, list | set | tuple | dict | Iterator)
                     else a for a in items]
        get_options = {k: v for k, v in given.items() if k in _CLIENT_GET_OPTIONS}
        with plain_dask():
            results = cached_compute(*items, scheduler=self, traverse=False,
                                     sync=given.get("sync", False),
                                     optimize_graph=given.get("optimize_graph", True),
                                     **options, **get_options)
        return results[0] if singleton else list(results)

    return compute


def _client_persist(original: Callable) -> Callable:
    signature = inspect.signature(original)

    @functools.wraps(original)
    def persist(self: Any, *args: Any, **kwargs: Any) -> Any:
        bound = _bound_if_routed(signature, self, args, kwargs, "Client.persist")
        if bound is None:
            return original(self, *args, **kwargs)
        options, given = bound
        items, singleton = _as_list(given["collections"])
        get_options = {k: v for k, v in given.items() if k in _CLIENT_GET_OPTIONS}
        # Client.persist ignores its other keywords; so does this.
        with plain_dask():
            persisted = cached_persist(*items, scheduler=self,
                                       optimize_graph=given.get("optimize_graph", True),
                                       **options, **get_options)
        return persisted[0] if singleton else list(persisted)

    return persist


def _client_get(original: Callable) -> Callable:
    @functools.wraps(original)
    def get(self: Any, dsk: Any, keys: Any, *args: Any, **kwargs: Any) -> Any:
        options = _options()
        if (options is None or args or _asynchronous(self, "Client.get")
                or kwargs.get("asynchronous") or _colliding(kwargs, "Client.get")):
            return original(self, dsk, keys, *args, **kwargs)
        outputs = _expression_outputs(dsk, keys, "Client.get")
        if outputs is None:
            return original(self, dsk, keys, *args, **kwargs)
        with plain_dask():
            return cached_compute(*outputs, scheduler=self, traverse=False, **options,
                                  **kwargs)

    return get


def _client_unsupported(original: Callable) -> Callable:
    name = original.__name__

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _options() is not None:
            _say_once(f"Client.{name} (client_lib.CachedClient caches {name})")
        return original(self, *args, **kwargs)

    return call


_WRAPPERS = {"compute": _client_compute, "persist": _client_persist, "get": _client_get,
             "submit": _client_unsupported, "map": _client_unsupported}


def wrap_client() -> None:
    """Put the wrappers in place of ``distributed.Client``'s functions (once)."""
    from distributed import Client

    for name in _CLIENT_METHODS:
        if name in _wrapped:
            continue
        original = Client.__dict__[name]
        wrapper = _WRAPPERS[name](original)
        setattr(Client, name, wrapper)
        _wrapped[name] = (original, wrapper)


def unwrap_client() -> None:
    """Put ``distributed.Client``'s own functions back (those still wrapped by us)."""
    if not _wrapped:
        return
    from distributed import Client

    for name, (original, wrapper) in list(_wrapped.items()):
        if Client.__dict__.get(name) is wrapper:  # else someone wrapped it since: theirs
            setattr(Client, name, original)
        del _wrapped[name]
