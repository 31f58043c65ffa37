"""How code is told apart from libraries, and how an installed library is identified.

``library_version`` decides whether a module is hashed by its code (user code) or by its
distribution's version (a library). A wrong answer is a stale hit, so the decision goes by
where the module's file is, never by its name alone.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

import pytest

from client_lib.hashing.provenance import library_version, local_build
from tests.correctness._library import build_wheel, install


@pytest.fixture
def fresh_library_cache():
    library_version.cache_clear()
    yield
    library_version.cache_clear()


def test_user_module_named_like_the_standard_library_is_user_code(tmp_path, monkeypatch,
                                                                   fresh_library_cache):
    stdlib = f"python-{sys.version_info[0]}.{sys.version_info[1]}"
    assert library_version("wave") == stdlib
    library_version.cache_clear()
    (tmp_path / "wave.py").write_text("def scale(x):\n    return x * 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = sys.modules.pop("wave", None)
    try:
        import wave

        assert wave.__file__ == str(tmp_path / "wave.py")
        assert library_version("wave") is None
    finally:
        sys.modules.pop("wave", None)
        if saved is not None:
            sys.modules["wave"] = saved


def test_a_module_not_imported_yet_is_classified_by_where_it_would_load(
        tmp_path, monkeypatch, fresh_library_cache):
    (tmp_path / "not_imported_helpers.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "not_imported_helpers" not in sys.modules
    assert library_version("not_imported_helpers") is None
    assert "not_imported_helpers" not in sys.modules  # found, not imported
    assert library_version("this") == f"python-{sys.version_info[0]}.{sys.version_info[1]}"
    assert "this" not in sys.modules


def _installed(tmp_path: Path, tag: str, version: str, source: str) -> importlib.metadata.\
        Distribution:
    site = tmp_path / tag / "site-packages"
    install([build_wheel(tmp_path / tag / "wheels", "tinylib_id", version, source)], site)
    (info,) = site.glob("tinylib_id-*.dist-info")
    return importlib.metadata.PathDistribution(info)


@pytest.mark.slow
def test_a_local_build_is_identified_by_its_files_a_release_by_its_version(tmp_path):
    code = "def scale(x):\n    return x * 2\n"
    first = _installed(tmp_path, "a", "0.1.0", code)
    again = _installed(tmp_path, "b", "0.1.0", code)  # same wheel built elsewhere
    edited = _installed(tmp_path, "c", "0.1.0", code.replace("2", "3"))
    assert local_build(first, "tinylib_id").startswith("+local:")
    # direct_url.json names the wheel's path, which differs per machine: not part of it
    assert (first.read_text("direct_url.json") != again.read_text("direct_url.json"))
    assert local_build(first, "tinylib_id") == local_build(again, "tinylib_id")
    assert local_build(first, "tinylib_id") != local_build(edited, "tinylib_id")
    # Installed from an index (no direct_url.json): the version says it all.
    (Path(first._path) / "direct_url.json").unlink()  # type: ignore[attr-defined]
    assert local_build(first, "tinylib_id") == ""
