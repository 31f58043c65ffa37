"""``cache_version``: identify a function by a version the user chose, not by its code."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["cache_version"]

F = TypeVar("F", bound=Callable[..., Any])


def cache_version(version: str | int) -> Callable[[F], F]:
    """Decorator: identify a function by ``version`` instead of by its code.

    For users who want manual control: editing the function no longer invalidates its
    cached results; changing ``version`` does. Works under ``@dask.delayed`` too::

        @dask.delayed
        @cache_version("2")
        def load(path): ...
    """

    def decorate(func: F) -> F:
        target = getattr(func, "_obj", func)  # a dask.delayed-wrapped function
        target.__cache_version__ = str(version)
        return func

    return decorate
