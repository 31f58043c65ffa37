"""Check an installed wheel against the source tree it was built from.

    python .ci/check_wheel.py SOURCE_ROOT

Run with the interpreter of a fresh environment that has only the wheel installed, from a
directory outside the checkout (``.ci/run`` does), so that nothing can be imported from the
source tree by accident. Every module of the source tree (``__main__`` modules aside: they
run a program) and every module the installed packages contain must import, from the
installation; every file under a ``static/`` or ``templates/`` directory of a package must be
installed too. Prints each problem and exits 1 if there is any.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
from pathlib import Path

__all__ = ["PACKAGES", "main", "problems"]

PACKAGES = ("cache_server", "client_lib", "storage")
DATA_DIRECTORIES = frozenset({"static", "templates"})


def source_modules(root: Path) -> set[str]:
    """Dotted names of every ``.py`` file of the packages under ``root``."""
    names: set[str] = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def data_files(root: Path) -> set[Path]:
    """Paths, relative to ``root``, of the files a package serves (static/, templates/)."""
    return {
        path.relative_to(root)
        for package in PACKAGES
        for path in (root / package).rglob("*")
        if path.is_file() and DATA_DIRECTORIES & set(path.relative_to(root).parts)
    }


def installed_modules() -> set[str]:
    """Dotted names of every module the installed packages contain (imports packages)."""
    names: set[str] = set()
    for package in PACKAGES:
        spec = importlib.util.find_spec(package)
        if spec is None or spec.submodule_search_locations is None:
            continue
        names.add(package)
        found = pkgutil.walk_packages(spec.submodule_search_locations, f"{package}.",
                                      onerror=lambda name: None)
        names.update(info.name for info in found)
    return names


def problems(root: Path) -> list[str]:
    """What is wrong with the installation, one line each (empty: nothing)."""
    found: list[str] = []
    for name in sorted(source_modules(root) | installed_modules()):
        if name.rpartition(".")[2] == "__main__":
            continue
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - every failure is a finding
            found.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        origin = Path(module.__file__ or "").resolve()
        if origin.is_relative_to(root):
            found.append(f"{name}: imported from the source tree ({origin})")
    for relative in sorted(data_files(root)):
        package = importlib.util.find_spec(relative.parts[0])
        installed = [Path(p).parent for p in package.submodule_search_locations or ()] \
            if package else []
        if not any((base / relative).is_file() for base in installed):
            found.append(f"{relative}: not installed")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = Path(argv[0]).resolve()
    found = problems(root)
    for line in found:
        print(f"wheel check: {line}", file=sys.stderr)
    if not found:
        print(f"wheel check: every module of {', '.join(PACKAGES)} imports from the "
              "installation")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
