"""One instance per process of a class that owns a background thread (the lease keeper,
the store queue).

A forked child makes its own instance on first use: its parent's thread did not follow
it into the child, so the parent's instance would queue work nobody does.
"""

from __future__ import annotations

import os
import threading
from typing import Any, TypeVar

__all__ = ["process_singleton"]

T = TypeVar("T")


def process_singleton(cls: type[T]) -> type[T]:
    """Class decorator: ``cls.get()`` returns this process's instance of ``cls``, made
    (``cls()``) on the first call in each process. Thread safe."""
    lock = threading.Lock()
    held: dict[int, Any] = {}  # pid -> the instance (one entry: this process's)

    def get() -> T:
        pid = os.getpid()
        instance = held.get(pid)
        if instance is None:
            with lock:
                instance = held.get(pid)
                if instance is None:
                    held.clear()
                    instance = held[pid] = cls()
        return instance

    cls.get = staticmethod(get)  # type: ignore[attr-defined]
    return cls
