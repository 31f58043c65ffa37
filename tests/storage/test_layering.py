"""storage imports neither client_lib nor cache_server, and exports exactly its public names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import storage
from tests._imports import imported_modules

STORAGE_DIR = Path(storage.__file__).parent
FORBIDDEN = ("client_lib", "cache_server")


def test_storage_sources_do_not_import_upper_layers() -> None:
    for path in STORAGE_DIR.rglob("*.py"):
        bad = {m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_storage_loads_no_upper_layer() -> None:
    code = (
        "import sys, storage, storage.header, storage.errors; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_all_matches_public_names() -> None:
    public = {
        name
        for name, value in vars(storage).items()
        if not name.startswith("_") and not isinstance(value, type(sys))
    }
    assert set(storage.__all__) == public
    assert len(storage.__all__) == len(set(storage.__all__))
