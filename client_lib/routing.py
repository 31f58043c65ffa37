"""``enable``: Dask's own entry points go through the cache, with no other code change.
docs/architecture.md, Zero code change.

While enabled, ``obj.compute()``, ``dask.compute``, ``obj.persist()``, ``dask.persist`` and,
with ``distributed``, ``Client.compute``, ``Client.persist`` and ``Client.get`` (what
``.compute()`` calls under a default client) take the steps of ``cached_compute`` /
``cached_persist``, with the options given to :func:`enable` (each defaulting to its
``result-cache`` config), and return what Dask returns. Two hooks:

- Dask's ``scheduler`` config holds a :class:`_Router` (``dask.config.set(scheduler=f)``
  is Dask's documented way to run every computation that names no scheduler through
  ``f``). It receives the expression ``dask.compute`` built and hands it to
  ``cached_compute`` as a :class:`~client_lib.plan.materialize.Prebuilt`, on the scheduler Dask would
  have chosen without it; ``dask.persist`` hands it the collections themselves (Dask's
  protocol for a scheduler with a ``persist`` method).
- ``distributed`` offers no client-side hook: a default ``Client`` replaces the
  ``scheduler`` config with ``"dask.distributed"``, and ``Client.compute`` / ``persist``
  never read it. So the ``Client`` class's ``compute``, ``persist``, ``get``, ``submit`` and
  ``map`` are wrapped, at :func:`enable` when ``distributed`` is imported, else by a
  client preload (``distributed.client.preload``) when the first ``Client`` starts;
  :func:`disable` puts the original functions back.

Computed as plain Dask, said once: ``Client.submit`` / ``map`` (``CachedClient`` caches
those), a graph handed to a scheduler directly (``compute_as_if_collection``,
``Client.get`` with a graph), an asynchronous client, and a compute keyword that is also
an option of the cache (``x.compute(cache=...)`` is Dask's own ``cache`` argument). Not
seen at all, because Dask does not ask the config then: an explicit ``scheduler=``
argument naming a local scheduler, or a ``scheduler`` config set while enabled.

Thread safety: enabling and disabling take a lock and act on the whole process, as Dask's
config does; routed calls read the options once.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dask
import dask.config
from dask.core import flatten

from .compute import cached_compute, refresh_requested
from .core.config import setting
from .core.notices import warn_once
from .persist import cached_persist
from .plan.materialize import Prebuilt
from .plan.scheduler_hook import SchedulerHook, plain_dask, routing_allowed
from .policy.modes import resolve_policy
from .transport.client import CacheClient

__all__ = ["dask_setup", "disable", "enable", "enable_from_config", "enabled"]

#: The keyword options of ``cached_compute`` that :func:`enable` takes.
OPTIONS = ("cache", "policy", "namespace", "explain", "refresh")
#: This module, as a ``distributed.client.preload`` entry (its ``dask_setup``).
PRELOAD = __name__
_CLIENT_METHODS = ("compute", "persist", "get", "submit", "map")
_CLIENT_GET_OPTIONS = ("workers", "allow_other_workers", "resources", "retries", "priority",
                       "fifo_timeout", "actors")


@dataclass
class _Enabled:
    options: dict[str, Any]
    hook: _Router
    scheduler_set: dask.config.set  # its __exit__ puts the previous value (or none) back
    preload_set: dask.config.set | None = None


_state: _Enabled | None = None
_lock = threading.RLock()
# distributed.Client's functions while they are wrapped: name -> (original, wrapper)
_wrapped: dict[str, tuple[Any, Any]] = {}


def enable(**options: Any) -> None:
    """Route Dask's entry points through the cache (module docstring) until
    :func:`disable`. ``options`` are ``cached_compute``'s ``cache``, ``policy``,
    ``namespace``, ``explain`` and ``refresh``; each one left out is read from the
    ``result-cache`` config at every call, like ``cached_compute`` does. Calling it again
    replaces the options. Raises ``TypeError`` / ``ValueError`` for an unknown option or a
    bad value; a cache that cannot be reached is no error (each call warns once and
    computes, as ``cached_compute`` does)."""
    _check(options)
    global _state
    with _lock:
        disable()
        previous = dask.config.get("scheduler", None)
        hook = _Router(previous)
        state = _Enabled(dict(options), hook, dask.config.set(scheduler=hook))
        if "distributed.client" in sys.modules:
            _wrap_client()
        else:  # wrapped when the first Client starts, if distributed is ever used
            state.preload_set = _add_preload()
        _state = state


def disable() -> None:
    """Dask's entry points compute as plain Dask again: the ``scheduler`` config gets its
    previous value back (or none, if it had none) unless something set another since,
    ``distributed.Client`` its own functions. Does nothing when not enabled."""
    global _state
    with _lock:
        state, _state = _state, None
        if state is None:
            return
        if dask.config.get("scheduler", None) is state.hook:
            state.scheduler_set.__exit__(None, None, None)
        _remove_preload(state)
        _unwrap_client()


@contextmanager
def enabled(**options: Any) -> Iterator[None]:
    """:func:`enable` inside the block; afterwards, what was before (disabled, or enabled
    with the earlier options)."""
    with _lock:
        before = dict(_state.options) if _state is not None else None
    enable(**options)
    try:
        yield
    finally:
        if before is None:
            disable()
        else:
            enable(**before)


def enable_from_config() -> None:
    """At import of ``client_lib``: :func:`enable` when config ``result-cache.enabled``
    (``DASK_RESULT_CACHE__ENABLED``) is true. A value that is not a yes or a no warns and
    leaves the cache disabled: an import must never fail (workers import ``client_lib``
    to run cache tasks)."""
    value = setting("enabled")
    flag = _flag(value)
    if flag is None:
        warn_once(f"result-cache.enabled must be true or false, not {value!r}: Dask's entry "
                  "points are not routed through the cache", user_warning=True)
    elif flag and _state is None:
        enable()


def dask_setup(server: Any) -> None:
    """A ``distributed`` preload's entry (``--preload client_lib.routing``).

    On a worker (or any server): enable the cache there when config says so, once the
    nanny's configuration is in place (a worker that imported ``client_lib`` earlier, as
    a spawned process importing its parent's main module does, had its hook dropped by
    the configuration the nanny sets). As ``distributed.client.preload``: the first
    ``Client`` started while enabled wraps the ``Client`` class (then the entry is no
    longer needed)."""
    from distributed import Client

    with _lock:
        if isinstance(server, Client):
            if _state is not None:
                _wrap_client()
                _remove_preload(_state)
            return
        if _flag(setting("enabled")) and (
                _state is None or dask.config.get("scheduler", None) is not _state.hook):
            enable(**(_state.options if _state is not None else {}))


def _options() -> dict[str, Any] | None:
    """The options of a call to route, or ``None``: disabled, or the cache's own call."""
    state = _state
    if state is None or not routing_allowed():
        return None
    return state.options


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


class _Router(SchedulerHook):
    """What Dask's ``scheduler`` config holds while enabled."""

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


def _routed(signature: inspect.Signature, client: Any, args: tuple, kwargs: dict,
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
        routed = _routed(signature, self, args, kwargs, "Client.compute")
        if routed is None or routed[1].get("kwargs"):  # those: Dask's own error
            return original(self, *args, **kwargs)
        options, given = routed
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
        routed = _routed(signature, self, args, kwargs, "Client.persist")
        if routed is None:
            return original(self, *args, **kwargs)
        options, given = routed
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


def _wrap_client() -> None:
    from distributed import Client

    for name in _CLIENT_METHODS:
        if name in _wrapped:
            continue
        original = Client.__dict__[name]
        wrapper = _WRAPPERS[name](original)
        setattr(Client, name, wrapper)
        _wrapped[name] = (original, wrapper)


def _unwrap_client() -> None:
    if not _wrapped:
        return
    from distributed import Client

    for name, (original, wrapper) in list(_wrapped.items()):
        if Client.__dict__.get(name) is wrapper:  # else someone wrapped it since: theirs
            setattr(Client, name, original)
        del _wrapped[name]


def _add_preload() -> dask.config.set:
    preload = list(dask.config.get("distributed.client.preload", []) or [])
    argv = list(dask.config.get("distributed.client.preload-argv", []) or [])
    update: dict[str, Any] = {"distributed.client.preload": [*preload, PRELOAD]}
    if argv and not isinstance(argv[0], str):  # one argv per preload: ours takes none
        update["distributed.client.preload-argv"] = [*argv, []]
    return dask.config.set(update)


def _remove_preload(state: _Enabled) -> None:
    """Take this module out of ``distributed.client.preload`` again: the previous value
    back, or, once ``distributed`` loaded its defaults, the list without it."""
    if state.preload_set is None:
        return
    preload_set, state.preload_set = state.preload_set, None
    preload = dask.config.get("distributed.client.preload", [])
    if PRELOAD not in preload:
        return
    if "distributed" not in sys.modules:
        preload_set.__exit__(None, None, None)
        return
    index = preload.index(PRELOAD)
    update: dict[str, Any] = {"distributed.client.preload": preload[:index] + preload[index + 1:]}
    argv = dask.config.get("distributed.client.preload-argv", [])
    if len(argv) == len(preload) and argv and not isinstance(argv[0], str):
        update["distributed.client.preload-argv"] = argv[:index] + argv[index + 1:]
    dask.config.set(update)


# -- options -----------------------------------------------------------------------------

def _check(options: dict[str, Any]) -> None:
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TypeError(f"enable() got unknown option(s) {', '.join(unknown)}; its options "
                        f"are cached_compute's {', '.join(OPTIONS)}")
    cache = options.get("cache")
    if cache is not None and not isinstance(cache, str | CacheClient):
        raise TypeError(f"cache must be a URL or a CacheClient, not {type(cache).__name__}")
    if options.get("policy") is not None:
        resolve_policy(options["policy"])
    namespace = options.get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise TypeError(f"namespace must be a string, not {type(namespace).__name__}")
    if not isinstance(options.get("explain", False), bool):
        raise TypeError(f"explain must be True or False, not {options['explain']!r}")
    if options.get("refresh") is not None:
        refresh_requested(options["refresh"])


def _flag(value: Any) -> bool | None:
    """A yes or a no from config (``DASK_..=1`` arrives as the int 1), else ``None``."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        return {"true": True, "1": True, "yes": True, "on": True,
                "false": False, "0": False, "no": False, "off": False, "": False,
                }.get(value.strip().lower())
    if value is None:
        return False
    return None
