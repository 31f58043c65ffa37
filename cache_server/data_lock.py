"""One user of a data directory with the embedded Redis at a time: a server, or
``gc``/``reindex``. (Replicas on a shared Redis coordinate through locks in Redis instead:
:mod:`cache_server.index.locks`.)

Eviction and ``gc`` delete objects once the index says nothing references them; that is
safe only if no other process stores into the same directory meanwhile (a store may reuse
an object just being deleted). The server holds an exclusive ``flock`` on
``<data_dir>/server.lock`` for its whole life, and the maintenance commands take the same
lock, so each waits for, or refuses to run beside, the other. The kernel drops the lock
when its holder dies, even by SIGKILL, so a crash never leaves a stale lock.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from types import TracebackType

__all__ = ["DataDirBusy", "DataDirLock"]

LOCK_NAME = "server.lock"


class DataDirBusy(RuntimeError):
    """Another server or maintenance command holds the data directory."""


class DataDirLock:
    """The exclusive lock of one data directory. Not reentrant; a context manager."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.path = Path(data_dir) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, wait: float = 0.0) -> DataDirLock:
        """Take the lock, retrying for up to ``wait`` seconds (a restarting server may still
        be shutting down); raises :class:`DataDirBusy` naming the holder's pid."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
                    os.close(fd)
                    raise DataDirBusy(
                        f"{self.path.parent} is in use by another dask-cache server or "
                        f"maintenance command (pid {holder}); stop it first"
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> DataDirLock:
        return self.acquire() if self._fd is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
