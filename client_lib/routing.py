"""``enable``: Dask's own entry points go through the cache, with no other code change.
docs/design/zero-code.md, Zero code change.

While enabled, ``obj.compute()``, ``dask.compute``, ``obj.persist()``, ``dask.persist`` and,
with ``distributed``, ``Client.compute``, ``Client.persist`` and ``Client.get`` (what
``.compute()`` calls under a default client) take the steps of ``cached_compute`` /
``cached_persist``, with the options given to :func:`enable` (each defaulting to its
``result-cache`` config), and return what Dask returns (:mod:`client_lib.routed`). This
module switches the two hooks on and off:

- Dask's ``scheduler`` config holds a :class:`~client_lib.routed.Router`
  (``dask.config.set(scheduler=f)`` is Dask's documented way to run every computation that
  names no scheduler through ``f``); :func:`disable` puts the previous value back.
- ``distributed`` offers no client-side hook (a default ``Client`` replaces the
  ``scheduler`` config with ``"dask.distributed"``; ``Client.compute`` / ``persist`` read
  none), so ``distributed.Client``'s functions are wrapped: at :func:`enable` when
  ``distributed`` is imported, else by a client preload (``distributed.client.preload``,
  :func:`dask_setup`) when the first ``Client`` starts; :func:`disable` puts them back.

Not seen at all, because Dask does not ask the config then: an explicit ``scheduler=``
argument naming a local scheduler, or a ``scheduler`` config set while enabled.

Thread safety: enabling and disabling take a lock and act on the whole process, as Dask's
config does; routed calls read the options once.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import dask.config

from . import routed
from .core.config import setting
from .core.notices import warn_once
from .plan.settings import refresh_requested
from .policy.modes import resolve_policy
from .routed import OPTIONS, Router
from .transport.client import CacheClient
from .worker import add_preload

__all__ = ["dask_setup", "disable", "enable", "enable_from_config", "enabled"]

#: This module, as a ``distributed.client.preload`` entry (its ``dask_setup``).
PRELOAD = __name__


@dataclass
class _Enabled:
    options: dict[str, Any]
    hook: Router
    scheduler_set: dask.config.set  # its __exit__ puts the previous value (or none) back
    preload_set: dask.config.set | None = None


_state: _Enabled | None = None
_lock = threading.RLock()


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
        _drop_stale_router()
        previous = dask.config.get("scheduler", None)
        hook = Router(previous)
        state = _Enabled(dict(options), hook, dask.config.set(scheduler=hook))
        if "distributed.client" in sys.modules:
            routed.wrap_client()
        else:  # wrapped when the first Client starts, if distributed is ever used
            state.preload_set = _add_preload()
        routed.activate(options)
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
        routed.deactivate()
        if dask.config.get("scheduler", None) is state.hook:
            state.scheduler_set.__exit__(None, None, None)
        _drop_stale_router()
        _remove_preload(state)
        routed.unwrap_client()


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
                routed.wrap_client()
                _remove_preload(_state)
            return
        if _flag(setting("enabled")) and (
                _state is None or dask.config.get("scheduler", None) is not _state.hook):
            enable(**(_state.options if _state is not None else {}))


def _drop_stale_router() -> None:
    """A router of an earlier :func:`enable` in the ``scheduler`` config (a config block
    entered while it was there puts it back when it ends): the value it replaced instead,
    or none."""
    current = dask.config.get("scheduler", None)
    if not isinstance(current, Router) or (_state is not None and current is _state.hook):
        return
    if current.previous is None:
        dask.config.config.pop("scheduler", None)  # as dask.config.set's own exit does
    else:
        dask.config.set(scheduler=current.previous)


def _add_preload() -> dask.config.set:
    return add_preload("distributed.client", PRELOAD)


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
