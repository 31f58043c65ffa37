"""The task hash of one argument value, for the value-hashing tests (in this process and
in fresh ones)."""

from __future__ import annotations

from typing import Any

import dask

from client_lib import task_hashes

__all__ = ["value_hash"]


def identity(x: Any) -> Any:
    return x


def value_hash(value: Any) -> str | None:
    """The hash of ``identity(value)`` as a pure delayed task (``None``: volatile)."""
    return task_hashes(dask.delayed(identity, pure=True)(value, dask_key_name="v"))["v"]
