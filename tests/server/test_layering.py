"""The server's layers (docs/design/server-and-index.md, "The server's layers"): ``api``
(HTTP) over ``service`` (domain operations) over ``index`` (Redis) and ``storage``; ``cli``
beside them. The service and the index know nothing of HTTP, so the offline maintenance
commands run without it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import cache_server
from tests._imports import imported_modules

PACKAGE = Path(cache_server.__file__).parent
HTTP = ("fastapi", "starlette", "uvicorn", "cache_server.api")


def sources(subpackage: str) -> list[Path]:
    paths = sorted((PACKAGE / subpackage).rglob("*.py"))
    assert paths, subpackage
    return paths


def imports_of(subpackage: str, forbidden: tuple[str, ...]) -> dict[str, set[str]]:
    found = {}
    for path in sources(subpackage):
        bad = {m for m in imported_modules(path)
               if any(m == f or m.startswith(f"{f}.") for f in forbidden)}
        if bad:
            found[str(path.relative_to(PACKAGE))] = bad
    return found


def test_the_service_knows_neither_http_nor_the_cli() -> None:
    assert imports_of("service", (*HTTP, "cache_server.cli")) == {}


def test_the_index_knows_neither_http_nor_the_service() -> None:
    assert imports_of("index", (*HTTP, "cache_server.cli", "cache_server.service")) == {}


def test_routes_reach_redis_only_through_the_service() -> None:
    assert imports_of("api/routers", ("cache_server.index", "redis")) == {}


#: The service's parts (cache_server/service/cache.py), each importing only the ones named:
#: :class:`ResultCache` (``cache``) builds them and hands calls down; none reaches back up.
SERVICE_PARTS = {
    "removal": set(),
    "capacity": {"removal"},
    "reads": {"removal"},
    "writes": {"removal", "capacity"},
}


def test_the_service_parts_import_downward_only() -> None:
    parts = {*SERVICE_PARTS, "cache", "maintenance"}
    found = {}
    for name, allowed in SERVICE_PARTS.items():
        used = {m.rsplit(".", 1)[-1] for m in imported_modules(PACKAGE / "service" / f"{name}.py")
                if m.startswith("cache_server.service.")}
        if bad := (used & parts) - allowed:
            found[name] = bad
    assert found == {}


def test_the_index_telemetry_needs_no_other_index_module() -> None:
    used = imported_modules(PACKAGE / "index" / "telemetry.py")
    assert {m for m in used if m.startswith("cache_server.index")} == set()


def test_offline_maintenance_loads_no_http_module() -> None:
    code = ("import sys, cache_server.cli.gc, cache_server.cli.reindex, "
            "cache_server.service.maintenance, cache_server.runtime; "
            f"print(sorted(m for m in sys.modules if m.startswith({HTTP!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_every_module_declares_all() -> None:
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "__main__.py":
            continue
        tree = ast.parse(path.read_text())
        targets = {t.id for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
                   for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
                   if isinstance(t, ast.Name)}
        if "__all__" not in targets:
            missing.append(str(path.relative_to(PACKAGE)))
    assert missing == []


def test_the_server_takes_only_protocol_facts_from_client_lib() -> None:
    """The service, the index and the HTTP layer import ``client_lib.wire`` (each protocol
    fact defined once) and nothing else of the client; the CLI shares its error hints."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE)
        allowed = ("client_lib.wire",) + (("client_lib.core.errors",) if where.parts[0] == "cli"
                                          else ())
        if where.parts[0] == "examples":  # a user's script: the public API
            continue
        bad = {m for m in imported_modules(path) if m.split(".")[0] == "client_lib"
               and not any(m == a or m.startswith(f"{a}.") for a in allowed)}
        if bad:
            found[str(where)] = bad
    assert found == {}

