"""client_lib runs on workers that have only client_lib: it never imports the server or
storage, and it exports exactly its public names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import client_lib
from tests._imports import imported_modules

FORBIDDEN = ("cache_server", "storage")


def test_client_lib_sources_do_not_import_the_server_or_storage():
    for path in Path(client_lib.__file__).parent.rglob("*.py"):
        bad = {m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_client_lib_loads_neither():
    code = ("import sys, client_lib; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_all_matches_public_names():
    public = {name for name, value in vars(client_lib).items()
              if not name.startswith("_") and not isinstance(value, type(sys))}
    assert set(client_lib.__all__) == public
