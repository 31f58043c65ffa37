"""SIGTERM and SIGINT stop a ``dask-cache`` command the same way: both raise
``KeyboardInterrupt`` in it, so the ``with`` blocks that started its children (the demo's
server, an embedded Redis) stop them before it exits. Installed explicitly, since a process
started with SIGINT ignored (a shell's background job, ``dask-cache demo --keep &``) gets
no Python handler for it, and SIGTERM's default ends the process without unwinding: the
children, in sessions of their own, ran on, orphaned.

Once a signal has arrived, further ones are ignored until the command ends: the children
are being stopped, within bounded waits (``RunningServer.stop``, ``EmbeddedRedis.stop``),
and a second Ctrl-C must not cut that short.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["stop_on_signals"]

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise ``KeyboardInterrupt`` while the block runs (main thread
    only: elsewhere nothing changes); the previous handlers come back after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        for other in _SIGNALS:
            signal.signal(other, signal.SIG_IGN)
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {signum: signal.signal(signum, interrupt) for signum in _SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
