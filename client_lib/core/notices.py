"""One warning per problem and process, for the whole client.

A cache problem never fails a computation, and it must not be silent either; nor may it
repeat for every task of a large graph. The first occurrence of a problem is a WARNING
record on the ``client_lib`` logger or, where the user's own call should show it, a
``RuntimeWarning`` with an INFO record (not both at WARNING: Python prints a WARNING record
on stderr even without logging configured, so the user would read it twice); later
occurrences are INFO records. Thread safe: stores report
from Dask's worker threads.
"""

from __future__ import annotations

import logging
import threading
import warnings

__all__ = ["warn_once"]

logger = logging.getLogger("client_lib")
_seen: set[str] = set()
_lock = threading.Lock()


def warn_once(message: str, *, key: str | None = None, user_warning: bool = False,
              stacklevel: int = 2) -> None:
    """Warn about a problem once per process. ``key`` names the problem (default: the
    message itself); ``user_warning`` also raises a ``RuntimeWarning`` the first time,
    ``stacklevel`` frames above the caller of this function."""
    key = message if key is None else key
    with _lock:
        first = key not in _seen
        _seen.add(key)
    if not first:
        logger.info(message)
        return
    if user_warning:
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
        logger.info(message)
        return
    logger.warning(message)
