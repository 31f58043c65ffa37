"""The cache's annotations on DataFrames are refused, loudly, where the frame is built.

dask-expr ignores ``dask.annotate`` (it warns once per process and builds no layers to carry
annotations), so a ``cache=False``, ``cache_ttl`` or ``cache_version`` annotation on a
``dask.dataframe`` collection could never reach its tasks: a frame built under
``dask.annotate(cache=False)`` would be served from the cache after what it reads changed,
one under ``cache_ttl`` after its entries expired. Recovering them is not possible from the
optimised expression (its names are not those of the expressions the user built), so a
frame, series, index or scalar built under one of them raises
:class:`~client_lib.core.errors.AnnotatedFrame` instead (issue 27, case 6;
docs/correctness.md, "Annotations on collections").

:func:`install` wraps ``FrameBase.__init__`` (every dask-expr collection passes there)
once ``dask.dataframe`` is imported, now or later (a finder on ``sys.meta_path`` waits for
the module, so importing ``client_lib`` never imports ``dask.dataframe``). Thread safe:
the check reads Dask's context variable of the building thread.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import sys
import threading
from typing import Any

from ..core.errors import AnnotatedFrame

__all__ = ["install"]

_MODULE = "dask.dataframe.dask_expr._collection"
_OWN = ("cache", "cache_ttl", "cache_version")
_lock = threading.Lock()
_installed = False


def install() -> None:
    """Refuse the cache's annotations on DataFrames from now on (module docstring).
    Idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        module = sys.modules.get(_MODULE)
        if module is not None:
            _wrap(module)
        else:
            sys.meta_path.insert(0, _WaitForCollections())


def _wrap(module: Any) -> None:
    base = module.FrameBase
    original = base.__init__
    if getattr(original, "_result_cache_checked", False):
        return

    @functools.wraps(original)
    def __init__(self: Any, expr: Any) -> None:
        from dask import get_annotations

        given = get_annotations()
        own = {name: given[name] for name in _OWN if name in given}
        if own:
            annotations = ", ".join(f"{name}={value!r}" for name, value in own.items())
            raise AnnotatedFrame(
                f"dask.annotate({annotations}) on a dask {type(self).__name__} ({expr._name}): "
                "dask.dataframe ignores annotations, so the cache could not honour it; "
                "build the frame outside the annotate block; for a task that must always "
                "run list its function in result-cache.volatile-functions, for a version "
                "decorate it with @client_lib.cache_version, for a lifetime set "
                "result-cache.ttl"
            )
        original(self, expr)

    __init__._result_cache_checked = True  # type: ignore[attr-defined]
    base.__init__ = __init__


class _WaitForCollections(importlib.abc.MetaPathFinder):
    """Finds nothing; when dask-expr's collection module is about to load, makes its
    loader wrap ``FrameBase`` once the module has run, and leaves ``sys.meta_path``."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _MODULE:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_then_wrap(module: Any) -> None:
            exec_module(module)
            _wrap(module)

        spec.loader.exec_module = exec_then_wrap  # type: ignore[method-assign]
        return spec
