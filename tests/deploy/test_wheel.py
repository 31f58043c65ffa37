"""A release is a wheel: it must hold every module and data file of the source tree, and its
console scripts must name modules it holds (an editable install hides a wheel that forgot a
subpackage). CI goes further (.ci/run): it installs the wheel into a fresh environment,
imports every module from it with .ci/check_wheel.py and runs ``dask-cache demo``."""

from __future__ import annotations

import configparser
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.deploy._compose import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def load_check_wheel() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_wheel", ROOT / ".ci" / "check_wheel.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what the wheel is built from, with a page's data files added the way a
    dashboard would ship them."""
    tree = tmp_path_factory.mktemp("source")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    for package in load_check_wheel().PACKAGES:
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    page = tree / "cache_server" / "page_fixture"
    (page / "static" / "css").mkdir(parents=True)
    (page / "templates").mkdir()
    (page / "__init__.py").write_text("")
    (page / "static" / "css" / "page.css").write_text("body {}\n")
    (page / "templates" / "index.html").write_text("<html></html>\n")
    return tree


@pytest.fixture(scope="module")
def wheel(source: Path, tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("dist")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(out), str(source)],
        capture_output=True, text=True, timeout=240,
    )
    assert build.returncode == 0, build.stdout[-2000:] + build.stderr[-2000:]
    (path,) = out.glob("*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_holds_every_module_and_data_file(source: Path, wheel: zipfile.ZipFile):
    check = load_check_wheel()
    names = set(wheel.namelist())
    modules = check.source_modules(source)
    assert {"cache_server.cli", "cache_server.examples.branches", "storage"} <= modules
    for module in modules:
        path = module.replace(".", "/")
        assert f"{path}.py" in names or f"{path}/__init__.py" in names, module
    data = {str(p) for p in check.data_files(source)}
    assert {"cache_server/page_fixture/static/css/page.css",
            "cache_server/page_fixture/templates/index.html"} <= data
    vendored = "cache_server/api/static/vendor"  # /docs and /redoc without a CDN
    assert {f"{vendored}/swagger-ui/swagger-ui-bundle.js", f"{vendored}/swagger-ui/swagger-ui.css",
            f"{vendored}/redoc/redoc.standalone.js", "cache_server/api/templates/index.html",
            "cache_server/api/static/dashboard/dashboard.js"} <= data  # and the dashboard
    assert data <= names
    assert not [n for n in names if n.startswith(("tests/", "bench/")) or "__pycache__" in n]


def test_every_entry_point_names_a_module_of_the_wheel(wheel: zipfile.ZipFile):
    (entry_points,) = [n for n in wheel.namelist() if n.endswith(".dist-info/entry_points.txt")]
    parser = configparser.ConfigParser()
    parser.read_string(wheel.read(entry_points).decode())
    targets = {section: dict(parser[section]) for section in parser.sections()}
    assert targets["console_scripts"]["dask-cache"] == "cache_server.cli:main"
    assert targets["dask_cli"]["cache"] == "cache_server.cli:cli"
    names = set(wheel.namelist())
    for group in targets.values():
        for target in group.values():
            path = target.partition(":")[0].replace(".", "/")
            assert f"{path}.py" in names or f"{path}/__init__.py" in names, target
