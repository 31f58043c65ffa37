"""Task references kept in a sidecar that is rewritten whole (a file replaced, an object
put again): what the directory stores and the bucket store share."""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Sequence

from storage.base import Sidecar, TaskReference
from storage.errors import CorruptObject

__all__ = ["SidecarEdits", "parse_sidecar"]


def parse_sidecar(raw: bytes, digest: str) -> Sidecar:
    """The sidecar of ``digest`` from its bytes; :class:`CorruptObject` if they are not."""
    try:
        sidecar = Sidecar.loads(raw)
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptObject(f"unreadable sidecar of {digest}: {exc}") from exc
    if sidecar.digest != digest:
        raise CorruptObject(f"sidecar of {digest} names {sidecar.digest}")
    return sidecar


class SidecarEdits:
    """``add_task``, ``remove_task`` and ``set_pinned`` as read, change, rewrite, serialised
    by ``_lock`` within the process (across processes the server's digest locks do it)."""

    _lock: threading.Lock

    @abstractmethod
    def sidecar(self, digest: str) -> Sidecar: ...

    @abstractmethod
    def _write_sidecar(self, sidecar: Sidecar) -> None:
        """Replace the stored sidecar of ``sidecar.digest`` atomically and durably."""

    def add_task(self, digest: str, task: TaskReference) -> Sidecar:
        with self._lock:
            return self._add_task_locked(digest, task)

    def add_tasks(self, digest: str, tasks: Sequence[TaskReference]) -> Sidecar:
        with self._lock:
            sidecar = self.sidecar(digest)
            new = [task for task in tasks if task.task_hash not in sidecar.tasks]
            return self._rewrite(sidecar.with_tasks(new)) if new else sidecar

    def remove_task(self, digest: str, task_hash: str) -> Sidecar:
        with self._lock:
            sidecar = self.sidecar(digest)
            if task_hash not in sidecar.tasks:
                return sidecar
            return self._rewrite(sidecar.without_task(task_hash))

    def set_pinned(self, digest: str, task_hash: str, pinned: bool) -> Sidecar:
        with self._lock:
            sidecar = self.sidecar(digest)
            if task_hash not in sidecar.tasks:
                raise KeyError(f"object {digest} has no task {task_hash}")
            if sidecar.tasks[task_hash].pinned == pinned:
                return sidecar
            return self._rewrite(sidecar.with_pinned(task_hash, pinned))

    def _add_task_locked(self, digest: str, task: TaskReference) -> Sidecar:
        sidecar = self.sidecar(digest)
        if task.task_hash in sidecar.tasks:
            return sidecar
        return self._rewrite(sidecar.with_task(task))

    def _rewrite(self, sidecar: Sidecar) -> Sidecar:
        self._write_sidecar(sidecar)
        return sidecar
