"""Durable, atomic publishing of files and directories on one local filesystem.

Zarr never fsyncs, and a half-written Zarr array opens without error and returns fill values
for missing chunks. So every object is written under a temporary name in the same filesystem,
fsynced (files, then directories), and renamed into place; the parent is fsynced after the
rename. Readers therefore see a whole object or none.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shutil
import uuid
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "TEMP_DIR_NAME",
    "durable_batch",
    "fsync_dir",
    "fsync_file",
    "fsync_tree",
    "new_temp_dir",
    "publish_dir",
    "remove_dir",
    "replace_file",
]

TEMP_DIR_NAME = ".tmp"


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (creations, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file below ``root``, then every directory, deepest first."""
    for dirpath, _dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            fsync_file(Path(dirpath, name))
        fsync_dir(Path(dirpath))


def _load_syncfs() -> object | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        return getattr(libc, "syncfs", None)
    except OSError:
        return None


_syncfs = _load_syncfs()


def durable_batch(root: Path, written: Iterable[Path]) -> None:
    """Make everything written under ``root`` durable at once: one ``syncfs(2)`` of its
    filesystem (Linux) commits every file and directory entry of a batch together, where
    :func:`fsync_tree` on each would cost several fsyncs per object. Elsewhere, or if
    ``syncfs`` fails, ``fsync_tree`` of every path in ``written`` (and of ``root``)."""
    if _syncfs is not None:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _syncfs(fd) == 0:  # type: ignore[operator]
                return
        finally:
            os.close(fd)
    for path in written:
        fsync_tree(path) if path.is_dir() else fsync_file(path)
    fsync_dir(root)


def new_temp_dir(root: Path, purpose: str) -> Path:
    """A fresh, empty directory under ``root/.tmp`` (same filesystem as the objects)."""
    temp_root = root / TEMP_DIR_NAME
    temp_root.mkdir(parents=True, exist_ok=True)
    path = temp_root / f"{purpose}-{uuid.uuid4().hex}"
    path.mkdir()
    return path


def publish_dir(temp: Path, final: Path) -> bool:
    """Rename the complete, already fsynced directory ``temp`` to ``final`` durably.

    Call :func:`fsync_tree` on ``temp`` first. Returns False, and removes ``temp``, when
    ``final`` already exists (another writer won the race; content addressing makes both
    copies equivalent).
    """
    _make_durable_dir(final.parent)
    try:
        os.rename(temp, final)
    except OSError:
        if not final.exists():
            raise
        remove_dir(temp)
        return False
    fsync_dir(final.parent)
    return True


def _make_durable_dir(path: Path) -> None:
    try:
        path.mkdir()
    except FileExistsError:
        return
    except FileNotFoundError:
        _make_durable_dir(path.parent)
        path.mkdir(exist_ok=True)
    fsync_dir(path.parent)


def replace_file(directory: Path, name: str, data: bytes) -> None:
    """Atomically and durably replace ``directory/name`` with ``data``."""
    temp = directory / f".{name}.{uuid.uuid4().hex}"
    try:
        with open(temp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, directory / name)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(directory)


def remove_dir(path: Path) -> None:
    """Remove a directory tree, ignoring one that is already gone."""
    shutil.rmtree(path, ignore_errors=True)
