"""client_lib runs on workers that have only client_lib: it never imports the server or
storage, and it exports exactly its public names. Inside it, sub-packages import downward
only (docs/architecture.md, "Packages and layers"), and no module imports another that
imports it back, not even for type checking."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import client_lib
from tests._imports import imported_modules

FORBIDDEN = ("cache_server", "storage")
PACKAGE = Path(client_lib.__file__).parent
#: client_lib's sub-packages, bottom first; the entry points (top-level modules) sit above.
LAYERS = ("core", "hashing", "wire", "transport", "policy", "execution", "plan")


def test_client_lib_sources_do_not_import_the_server_or_storage():
    for path in PACKAGE.rglob("*.py"):
        bad = {m for m in imported_modules(path) if m.split(".")[0] in FORBIDDEN}
        assert not bad, f"{path.name} imports {sorted(bad)}"


def test_importing_client_lib_loads_neither():
    code = ("import sys, client_lib; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_all_matches_public_names():
    for name in client_lib.__all__:  # each one loads (on first use)
        assert getattr(client_lib, name) is not None, name
    public = {name for name, value in vars(client_lib).items()
              if not name.startswith("_") and not isinstance(value, type(sys))}
    assert set(client_lib.__all__) == public  # and nothing else is public
    assert set(client_lib.__all__) <= set(dir(client_lib))


def test_the_protocol_facts_load_without_dask_collections():
    """The server imports ``client_lib.wire``'s bounds and headers at every start: they
    must not pull in the hasher, the HTTP client or Dask's collections (~0.5 s)."""
    code = ("import sys, client_lib.wire.bounds, client_lib.wire.headers, "
            "client_lib.wire.batch; print(sorted(m for m in sys.modules if m in "
            "('client_lib.compute', 'client_lib.hashing', 'client_lib.transport.client', "
            "'dask.array', 'distributed', 'httpx', 'numpy')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _client_imports(name: str) -> set[str]:
    """The client_lib modules ``name`` imports anywhere in its source (module level,
    inside functions, under ``TYPE_CHECKING``), relative imports resolved."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:  # ``from pkg import submodule``
                if f"{module}.{alias.name}" in MODULES:
                    found.add(f"{module}.{alias.name}")
                else:
                    found.add(module)
    return {m for m in found if m in MODULES and m != name}


def _layer(name: str) -> int:
    parts = name.split(".")
    if len(parts) > 2 or (len(parts) == 2 and parts[1] in LAYERS):
        return LAYERS.index(parts[1])
    return len(LAYERS)  # the entry points and the package itself


def test_every_module_belongs_to_a_layer():
    stray = [n for n in MODULES if n.count(".") == 1 and n.split(".")[1] not in LAYERS
             and not MODULES[n].name.startswith(("compute", "futures", "persist", "lazy",
                                                 "planning", "routing", "routed",
                                                 "worker"))]
    assert stray == []


def test_sub_packages_import_downward_only():
    upward = {name: sorted(m for m in _client_imports(name) if _layer(m) > _layer(name))
              for name in MODULES}
    assert {n: m for n, m in upward.items() if m} == {}


def test_no_import_cycles_not_even_for_type_checking():
    graph = {name: _client_imports(name) for name in MODULES}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append(path[path.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        path.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert cycles == []
def test_transport_imports_no_dask():
    """It runs wherever a load or store does; it reads config through core.config."""
    dask = {name: sorted(m for m in imported_modules(MODULES[name])
                         if m.split(".")[0] in ("dask", "distributed"))
            for name in MODULES if name.startswith("client_lib.transport")}
    assert {n: m for n, m in dask.items() if m} == {}

