"""``cache_version``: identify a function by a version the user chose, not by its code
(its bound state still counts: docs/correctness.md)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["cache_version", "script_module_name"]

F = TypeVar("F", bound=Callable[..., Any])


def cache_version(version: str | int) -> Callable[[F], F]:
    """Decorator: identify a function by ``version`` instead of by its code.

    For users who want manual control: editing the function no longer invalidates its
    cached results; changing ``version`` does. The version stands for the code and the
    globals it reads only: a bound instance, closure cells, defaults and partial arguments
    are still hashed. On a class, it stands for the class body; its instances' state
    counts. Works under ``@dask.delayed`` too::

        @dask.delayed
        @cache_version("2")
        def load(path): ...
    """

    def decorate(func: F) -> F:
        target = getattr(func, "_obj", func)  # a dask.delayed-wrapped function
        target.__cache_version__ = str(version)
        return func

    return decorate


def script_module_name(module: str | None) -> str | None:
    """A module's name, with ``__main__`` named as the script it was run from
    (``python chain.py`` and ``import chain`` give ``chain``)."""
    if module != "__main__":
        return module
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name:
        return spec.name
    file = getattr(main, "__file__", None)
    return os.path.splitext(os.path.basename(file))[0] if file else module
