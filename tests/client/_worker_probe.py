"""What a worker holds, asked without importing ``client_lib`` (``client.run`` pickles these
functions by reference: the worker imports this module, which imports nothing of ours)."""

from __future__ import annotations

import sys


def loaded(names: list[str]) -> dict[str, bool]:
    """Which of the modules ``names`` this process has imported."""
    return {name: name in sys.modules for name in names}


def warmed() -> dict | None:
    """What the cache's warm-up recorded here (URL -> seconds or error), or ``None`` when
    ``client_lib.execution.warm`` was never imported."""
    module = sys.modules.get("client_lib.execution.warm")
    return None if module is None else dict(module.WARMED)
