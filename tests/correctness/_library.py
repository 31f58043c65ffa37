"""A tiny installable package, built as a real wheel and installed by pip into a directory
named ``site-packages`` that a child process gets on its ``PYTHONPATH``.

That is what an install looks like to ``client_lib.hashing.provenance``: the module's file lies
under a ``site-packages`` directory and a ``*.dist-info`` (written by pip: ``METADATA``,
``RECORD``, ``INSTALLER``, ``direct_url.json``) names its distribution and version. The
test venv itself is never touched.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["build_wheel", "install", "uninstall"]


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "sha256=" + digest.decode()


def build_wheel(directory: Path, name: str, version: str, source: str) -> Path:
    """A pure-Python wheel of package ``name`` whose ``__init__.py`` is ``source``."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source.encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                            .encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
    }
    record = [f"{path},{_record_hash(data)},{len(data)}" for path, data in files.items()]
    files[f"{info}/RECORD"] = ("\n".join([*record, f"{info}/RECORD,,"]) + "\n").encode()
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel


def uninstall(name: str, site_packages: Path) -> None:
    """Remove an installed distribution as ``pip uninstall`` does: every file its
    ``RECORD`` lists, then the emptied directories. (``pip install --target --upgrade``
    replaces the package directory but leaves the old ``*.dist-info`` behind, which a
    real upgrade in a site-packages never does.)"""
    for info in site_packages.glob(f"{name}-*.dist-info"):
        directories = {info}
        for line in (info / "RECORD").read_text().splitlines():
            path = site_packages / line.split(",")[0]
            directories.add(path.parent)
            path.unlink(missing_ok=True)
        for directory in sorted(directories, key=lambda p: len(p.parts), reverse=True):
            for leftover in directory.glob("__pycache__"):
                shutil.rmtree(leftover)
            if directory.exists() and not any(directory.iterdir()):
                directory.rmdir()


def install(wheels: list[Path], site_packages: Path) -> None:
    """``pip install --target`` of wheels whose packages are not installed there."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--disable-pip-version-check", "--upgrade", "--target",
                    str(site_packages), *map(str, wheels)],
                   check=True, capture_output=True, text=True, timeout=120)
