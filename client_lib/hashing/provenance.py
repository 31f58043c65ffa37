"""Where code and data come from: library versions, local builds, compiled modules, files.

A library function is identified by its distribution's version (an upgrade invalidates
it); a distribution installed from a local build (``pip install .``) also by the
installer's record of its files; compiled user code and input files by their size and
modification time. Pure look-ups with process-wide caches where the answer cannot change
while the process runs (library versions); file stamps are read every time.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import xxhash

from ..core.errors import VolatileValue

__all__ = ["PYTHON", "compiled_stamp", "file_stamp", "library_version", "listed_file_stamps",
           "local_build", "resolves_to"]

PYTHON = f"python-{sys.version_info[0]}.{sys.version_info[1]}"
_MAX_DIR_ENTRIES = 10_000
_MIN_LISTING = 32  # candidates in one directory worth listing it instead of stat'ing each


def file_stamp(path: str) -> bytes | None:
    """``(size, mtime_ns)`` of a file, or of every file under a directory, or ``None``.

    Used for strings that name existing paths (``read_parquet`` pieces, ``read_csv`` paths):
    editing the file changes the stamp, so tasks reading it are recomputed. Directories
    are walked through symbolic links (each real directory once, so a link to a parent
    ends the walk there).
    """
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    if not os.path.isdir(path):
        return b"%d:%d" % (st.st_size, st.st_mtime_ns)
    parts = []
    seen = {os.path.realpath(path)}
    for n, (root, dirs, files) in enumerate(os.walk(path, followlinks=True)):
        dirs.sort()
        for name in list(dirs):
            real = os.path.realpath(os.path.join(root, name))
            if real in seen:  # a cycle, or a tree already walked through another link
                dirs.remove(name)
            seen.add(real)
        for name in sorted(files):
            full = os.path.join(root, name)
            try:
                fst = os.stat(full)
            except OSError:
                continue
            parts.append(b"%s:%d:%d" % (os.path.relpath(full, path).encode(
                "utf-8", "surrogatepass"), fst.st_size, fst.st_mtime_ns))
        if n > _MAX_DIR_ENTRIES or len(parts) > _MAX_DIR_ENTRIES:
            raise VolatileValue(f"directory {path!r} has too many entries to fingerprint")
    return xxhash.xxh3_128_digest(b"\0".join(parts))


def listed_file_stamps(values: Iterable[Any]) -> list[tuple[str, bytes]]:
    """The stamps of those ``values`` (strings or bytes) that name existing files or
    directories by the rule for single strings (more than two characters, a ``/``,
    ``\\`` or ``.``), sorted by name: a manifest column or an array of paths stands
    for its files as a list of paths does. A directory with many candidates is listed
    once instead of stat'ing each."""
    by_dir: dict[str, list[str]] = {}
    for value in values:
        if isinstance(value, bytes):
            value = os.fsdecode(value)
        if not isinstance(value, str) or not 2 < len(value) < 4096 or not (
                "/" in value or "\\" in value or "." in value):
            continue
        by_dir.setdefault(os.path.dirname(value), []).append(value)
    found = []
    for directory, names in by_dir.items():
        if len(names) >= _MIN_LISTING:
            try:
                present = set(os.listdir(directory or "."))
            except (OSError, ValueError):
                continue
            names = [n for n in names if os.path.basename(n) in present
                     or not os.path.basename(n)]
        for name in names:
            stamp = file_stamp(name)
            if stamp is not None:
                found.append((name, stamp))
    return sorted(found)


def compiled_stamp(module: str | None) -> str | None:
    """``size:mtime`` of a compiled extension module's file (rebuilding it changes the
    stamp), ``None`` for Python modules; its code cannot be hashed any other way."""
    file = getattr(sys.modules.get(module or ""), "__file__", None) or ""
    if not file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES)):
        return None
    stamp = file_stamp(file)
    if stamp is None:
        raise VolatileValue(f"compiled module {module!r} cannot be stat'ed")
    return stamp.decode()


@functools.cache
def library_version(top_module: str) -> str | None:
    """How a library identifies itself in a fingerprint, or ``None`` for user code.

    ``numpy`` -> ``"numpy==2.4.6"``; the standard library -> ``"python-3.11"``; a module
    outside site-packages and the standard library (scripts, notebooks, editable
    checkouts of the user's own packages) -> ``None``: it is hashed by its code.
    """
    if top_module in sys.builtin_module_names:
        return PYTHON
    if top_module == "__main__":
        return None
    file = _module_file(top_module)
    if file is None:  # frozen or built in, or not importable at all
        return PYTHON if top_module in sys.stdlib_module_names else None
    # By location, not by name: a user's own ``wave.py`` or ``code.py`` is user code.
    path = os.path.realpath(file)
    if path.startswith(_stdlib_dirs()) and not path.startswith(_site_dirs()):
        return PYTHON
    in_site = path.startswith(_site_dirs()) or (
        f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path
    )
    if not in_site:
        return None
    version = _distribution_version(top_module)
    if version is not None:
        return version
    st = os.stat(path)  # an undeclared module: its file stands in for a version
    return f"{top_module}@{st.st_size}:{st.st_mtime_ns}"


def local_build(dist: importlib.metadata.Distribution, top_module: str) -> str:
    """``""`` for a release; for a distribution installed from a local directory, archive
    or VCS checkout (it has a PEP 610 ``direct_url.json``: ``pip install .``), a digest of
    the installer's record of the package's files. Such builds are reinstalled again and
    again under one version number (a project's own code in a Docker image), so the
    version alone does not say which code is installed."""
    try:
        if dist.read_text("direct_url.json") is None:
            return ""
        record = dist.read_text("RECORD") or ""
    except OSError:
        return "+local:unreadable"
    prefixes = (f"{top_module}/", f"{top_module}.py,")
    lines = sorted(line for line in record.splitlines()
                   if line.startswith(prefixes) and "/__pycache__/" not in line)
    return "+local:" + xxhash.xxh3_128_hexdigest("\n".join(lines).encode())


@functools.cache
def _site_dirs() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    return tuple(os.path.realpath(p) + os.sep for p in paths)


@functools.cache
def _stdlib_dirs() -> tuple[str, ...]:
    paths = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
    return tuple(os.path.realpath(p) + os.sep for p in paths)


# Found at import rather than by a run's first hash: ``sysconfig.get_paths`` first loads
# the interpreter's build configuration (~2 ms in a fresh process's first call).
_site_dirs()
_stdlib_dirs()


@functools.cache
def _installed_versions() -> dict[str, tuple[str, str]]:
    """Normalised distribution name -> (version, ``*.dist-info`` path), from the directory
    names in site-packages (a directory listing: far cheaper than scanning every
    distribution's metadata, which costs tens of milliseconds per process)."""
    versions: dict[str, tuple[str, str]] = {}
    for site_dir in _site_dirs():
        try:
            names = os.listdir(site_dir)
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info"):
                dist, _, version = name[: -len(".dist-info")].rpartition("-")
                versions.setdefault(_normalise(dist), (version, os.path.join(site_dir, name)))
    return versions


def _normalise(name: str) -> str:
    return name.lower().replace("-", "_").replace(".", "_")


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distribution_version(top_module: str) -> str | None:
    installed = _installed_versions().get(_normalise(top_module))
    if installed is not None:
        version, info = installed
        dist = importlib.metadata.PathDistribution(Path(info))
        return f"{top_module}=={version}" + local_build(dist, top_module)
    dists = _distributions().get(top_module)  # modules named unlike their distribution
    if dists:
        name = sorted(dists)[0]
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            return None
        return f"{name}=={dist.version}" + local_build(dist, top_module)
    return None


def _module_file(top_module: str) -> str | None:
    """Where a top-level module lives: from ``sys.modules``, else found on ``sys.path``
    without importing it (a module imported only inside a task body)."""
    mod = sys.modules.get(top_module)
    if mod is not None:
        file = getattr(mod, "__file__", None)
        paths = list(getattr(mod, "__path__", []) or [])
        return file or (paths[0] if paths else None)
    try:
        spec = importlib.util.find_spec(top_module)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.has_location and spec.origin:
        return spec.origin
    locations = list(spec.submodule_search_locations or [])
    return locations[0] if locations else None


def resolves_to(obj: Any) -> bool:
    """Whether ``obj``'s module and qualified name lead back to ``obj`` itself (not true
    of lambdas, nested functions, factory products, or anything replaced since)."""
    qualname = getattr(obj, "__qualname__", "") or ""
    if "<" in qualname:  # <lambda>, <locals>
        return False
    found: Any = sys.modules.get(getattr(obj, "__module__", None) or "")
    for part in qualname.split("."):
        found = getattr(found, part, None)
        if found is None:
            return False
    return found is obj or getattr(found, "__func__", None) is obj
