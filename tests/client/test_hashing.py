"""Task hashes: stable across processes, sensitive to exactly what can change a result."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import dask
import h5py
import numpy as np
import pytest

from client_lib import cache_version, task_hashes
from tests.client._corpus import CORPUS

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def h5_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("h5") / "data.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(200.0).reshape(20, 10)  # the corpus needs 2-d
    return str(path)


def _probe(h5_file: str, seed: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    out = subprocess.run(
        [sys.executable, "-m", "tests.client._hash_probe", h5_file],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(out.stdout)


@pytest.mark.slow
def test_hashes_equal_across_processes_and_hash_seeds(h5_file):
    first, second = _probe(h5_file, "1"), _probe(h5_file, "12345")
    assert first == second
    assert len(first) >= 15 + len(CORPUS)
    for name, hashes in first.items():
        assert "volatile" not in hashes, name
        assert all(len(h) == 32 for h in hashes), name


@pytest.mark.slow
def test_hashes_equal_across_threads_and_in_a_worker_process(h5_file):
    from distributed import Client, LocalCluster

    from tests.client._hash_probe import hash_graphs, probe_graphs, probe_hashes

    graphs = probe_graphs(h5_file)
    here = hash_graphs(graphs)
    results: list[dict] = []
    threads = [threading.Thread(target=lambda: results.append(hash_graphs(graphs)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3 and all(r == here for r in results)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        (worker_pid,) = client.run(os.getpid).values()
        remote = client.submit(probe_hashes, h5_file, pure=False).result()
    assert worker_pid != os.getpid()
    assert remote == here


# -- what changes a hash -------------------------------------------------------------------

PIPELINE = """
import functools
import numpy as np
{imports}

{definitions}

def build(dask):
    a = dask.delayed(step_a, pure=True)({a_arg}, dask_key_name="a")
    b = dask.delayed(step_b, pure=True)(a, dask_key_name="b")
    c = dask.delayed(step_c, pure=True)(b, dask_key_name="c")
    side = dask.delayed(step_a, pure=True)(100, dask_key_name="side")
    return [c, side]
"""

BASE = dict(
    imports="",
    a_arg="1",
    definitions="""
def step_a(x):
    return x + 1

def step_b(x):
    return x * 2

def step_c(x):
    return x - 3
""",
)

HELPERS = """
def scale(x):
    return x * 2
"""


SINGLEDISPATCH = """
@functools.singledispatch
def helper(x):
    return x

@helper.register(int)
def _(x):
    return x * {k}
"""

CACHED_PROPERTY = """
class Config:
    @functools.cached_property
    def k(self):
        return {k}
"""

MODULE_CLOSURE = """
def make():
    import userhelpers

    def scaled(x):
        return userhelpers.scale(x)
    return scaled

scaled = make()
"""

METACLASS = """
class Meta(type):
    def __call__(cls):
        return {k}

class Made(metaclass=Meta):
    pass
"""

TAGGED = BASE["definitions"] + """
@dataclasses.dataclass
class Tagged:
    value: int

def tagged(tag):
    t = Tagged(1)
    t.tag = tag  # not a field, but part of the object
    return t
"""


def _variant(**changes):
    return {**BASE, **changes}


def _defs(body_b: str, extra: str = "") -> str:
    return f"""
def step_a(x):
    return x + 1

{extra}

def step_b(x):
{textwrap.indent(body_b, "    ")}

def step_c(x):
    return x - 3
"""


# (name, before, after, helper module before/after, keys expected to change)
CASES = [
    (
        "body of the last task",
        BASE,
        _variant(definitions=BASE["definitions"].replace("x - 3", "x - 4")),
        None,
        {"c"},
    ),
    (
        "body of the first task",
        BASE,
        _variant(definitions=BASE["definitions"].replace("x + 1", "x + 2")),
        None,
        {"a", "b", "c", "side"},
    ),
    (
        "same-module helper",
        _variant(definitions=_defs("return helper(x)", "def helper(x):\n    return x * 2")),
        _variant(definitions=_defs("return helper(x)", "def helper(x):\n    return x * 3")),
        None,
        {"b", "c"},
    ),
    (
        "helper two calls deep",
        _variant(
            definitions=_defs(
                "return outer(x)",
                "def inner(x):\n    return x * 2\n\ndef outer(x):\n    return inner(x) + 1",
            )
        ),
        _variant(
            definitions=_defs(
                "return outer(x)",
                "def inner(x):\n    return x * 5\n\ndef outer(x):\n    return inner(x) + 1",
            )
        ),
        None,
        {"b", "c"},
    ),
    (
        "helper in another user module (from-import)",
        _variant(imports="from userhelpers import scale", definitions=_defs("return scale(x)")),
        _variant(imports="from userhelpers import scale", definitions=_defs("return scale(x)")),
        (HELPERS, HELPERS.replace("x * 2", "x * 7")),
        {"b", "c"},
    ),
    (
        "helper in another user module (attribute)",
        _variant(imports="import userhelpers", definitions=_defs("return userhelpers.scale(x)")),
        _variant(imports="import userhelpers", definitions=_defs("return userhelpers.scale(x)")),
        (HELPERS, HELPERS.replace("x * 2", "x * 7")),
        {"b", "c"},
    ),
    (
        "closure variable",
        _variant(
            definitions=BASE["definitions"] + "\ndef make(k):\n    def f(x):\n"
            "        return x * k\n    return f\n\nstep_b = make(2)\n"
        ),
        _variant(
            definitions=BASE["definitions"] + "\ndef make(k):\n    def f(x):\n"
            "        return x * k\n    return f\n\nstep_b = make(3)\n"
        ),
        None,
        {"b", "c"},
    ),
    (
        "default argument",
        _variant(
            definitions=_defs("return x * k").replace("def step_b(x):", "def step_b(x, k=2):")
        ),
        _variant(
            definitions=_defs("return x * k").replace("def step_b(x):", "def step_b(x, k=3):")
        ),
        None,
        {"b", "c"},
    ),
    (
        "keyword-only default",
        _variant(
            definitions=_defs("return x * k").replace("def step_b(x):", "def step_b(x, *, k=2):")
        ),
        _variant(
            definitions=_defs("return x * k").replace("def step_b(x):", "def step_b(x, *, k=3):")
        ),
        None,
        {"b", "c"},
    ),
    (
        "module constant",
        _variant(definitions=_defs("return x * FACTOR", "FACTOR = 2")),
        _variant(definitions=_defs("return x * FACTOR", "FACTOR = 2.5")),
        None,
        {"b", "c"},
    ),
    (
        "module dict mutated in place",
        _variant(definitions=_defs("return x * TABLE['k']", "TABLE = {'k': 2}")),
        _variant(definitions=_defs("return x * TABLE['k']", "TABLE = {'k': 2}\nTABLE['k'] = 9")),
        None,
        {"b", "c"},
    ),
    (
        "class method the task calls",
        _variant(
            definitions=_defs(
                "return Scaler().apply(x)",
                "class Scaler:\n    def apply(self, x):\n        return x * 2",
            )
        ),
        _variant(
            definitions=_defs(
                "return Scaler().apply(x)",
                "class Scaler:\n    def apply(self, x):\n        return x * 4",
            )
        ),
        None,
        {"b", "c"},
    ),
    (
        "lambda",
        _variant(definitions=BASE["definitions"] + "\nstep_b = lambda x: x * 2\n"),
        _variant(definitions=BASE["definitions"] + "\nstep_b = lambda x: x * 3\n"),
        None,
        {"b", "c"},
    ),
    (
        "partial argument",
        _variant(
            definitions=BASE["definitions"] + "\ndef mul(x, k):\n    return x * k\n\n"
            "step_b = functools.partial(mul, k=2)\n"
        ),
        _variant(
            definitions=BASE["definitions"] + "\ndef mul(x, k):\n    return x * k\n\n"
            "step_b = functools.partial(mul, k=3)\n"
        ),
        None,
        {"b", "c"},
    ),
    ("argument value", BASE, _variant(a_arg="2"), None, {"a", "b", "c"}),
    (
        "numpy input array",
        _variant(a_arg="np.arange(10.0)"),
        _variant(a_arg="np.where(np.arange(10) == 3, -1.0, np.arange(10.0))"),
        None,
        {"a", "b", "c"},
    ),
    (
        "unchanged code moved down a line",
        BASE,
        _variant(definitions="\n\n# a comment\n" + BASE["definitions"]),
        None,
        set(),
    ),
    # -- stale hits the correctness suite found (tests/correctness) -----------------------
    (
        "module imported inside the task body",
        _variant(definitions=_defs("import userhelpers\nreturn userhelpers.scale(x)")),
        _variant(definitions=_defs("import userhelpers\nreturn userhelpers.scale(x)")),
        (HELPERS, HELPERS.replace("x * 2", "x * 7")),
        {"b", "c"},
    ),
    (
        "function attribute",
        _variant(definitions=_defs("return x * step_b.k") + "\nstep_b.k = 2\n"),
        _variant(definitions=_defs("return x * step_b.k") + "\nstep_b.k = 3\n"),
        None,
        {"b", "c"},
    ),
    (
        "lru_cache helper",
        _variant(definitions=_defs("return helper(x)", "@functools.lru_cache\n"
                                   "def helper(x):\n    return x * 2")),
        _variant(definitions=_defs("return helper(x)", "@functools.lru_cache\n"
                                   "def helper(x):\n    return x * 3")),
        None,
        {"b", "c"},
    ),
    (
        "singledispatch registration",
        _variant(definitions=_defs("return helper(x)", SINGLEDISPATCH.format(k=2))),
        _variant(definitions=_defs("return helper(x)", SINGLEDISPATCH.format(k=3))),
        None,
        {"b", "c"},
    ),
    (
        "cached_property of a class the task uses",
        _variant(definitions=_defs("return x * Config().k", CACHED_PROPERTY.format(k=2))),
        _variant(definitions=_defs("return x * Config().k", CACHED_PROPERTY.format(k=3))),
        None,
        {"b", "c"},
    ),
    (
        "enum member value",
        _variant(imports="import enum", definitions=_defs(
            "return x * K.ONE.value", "class K(enum.Enum):\n    ONE = 2")),
        _variant(imports="import enum", definitions=_defs(
            "return x * K.ONE.value", "class K(enum.Enum):\n    ONE = 3")),
        None,
        {"b", "c"},
    ),
    (
        "dataclass attribute that is not a field",
        _variant(imports="import dataclasses", a_arg="tagged(2)", definitions=TAGGED),
        _variant(imports="import dataclasses", a_arg="tagged(3)", definitions=TAGGED),
        None,
        {"a", "b", "c"},
    ),
    (
        "module imported by the function that made the closure",
        _variant(definitions=_defs("return scaled(x)", MODULE_CLOSURE)),
        _variant(definitions=_defs("return scaled(x)", MODULE_CLOSURE)),
        (HELPERS, HELPERS.replace("x * 2", "x * 7")),
        {"b", "c"},
    ),
    (
        "user module as an argument",
        _variant(imports="import userhelpers", a_arg="userhelpers"),
        _variant(imports="import userhelpers", a_arg="userhelpers"),
        (HELPERS, HELPERS.replace("x * 2", "x * 7")),
        {"a", "b", "c"},
    ),
    (
        "metaclass",
        _variant(definitions=_defs("return x * Made()", METACLASS.format(k=2))),
        _variant(definitions=_defs("return x * Made()", METACLASS.format(k=3))),
        None,
        {"b", "c"},
    ),
    (
        "object column: a number becomes its string",
        _variant(imports="import pandas as pd",
                 a_arg="pd.DataFrame({'o': pd.Series([1, 'b'], dtype=object)})"),
        _variant(imports="import pandas as pd",
                 a_arg="pd.DataFrame({'o': pd.Series(['1', 'b'], dtype=object)})"),
        None,
        {"a", "b", "c"},
    ),
]


def _load(tmp_path: Path, tag: str, source: str, helpers: str | None,
          build=lambda module, dask: module.build(dask)) -> dict:
    """Import the pipeline as module ``userpipe`` (same name for every variant) and hash."""
    directory = tmp_path / tag
    directory.mkdir()
    (directory / "userpipe.py").write_text(source)
    sys.path.insert(0, str(directory))
    try:
        for name in ("userpipe", "userhelpers"):
            sys.modules.pop(name, None)
        if helpers is not None:
            (directory / "userhelpers.py").write_text(helpers)
        spec = importlib.util.spec_from_file_location("userpipe", directory / "userpipe.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["userpipe"] = module
        spec.loader.exec_module(module)
        return task_hashes(build(module, dask))
    finally:
        sys.path.remove(str(directory))
        for name in ("userpipe", "userhelpers"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("name,before,after,helpers,changed", CASES, ids=[c[0] for c in CASES])
def test_an_edit_changes_exactly_the_task_and_its_descendants(
    tmp_path, name, before, after, helpers, changed
):
    old = _load(tmp_path, "old", PIPELINE.format(**before), helpers and helpers[0])
    new = _load(tmp_path, "new", PIPELINE.format(**after), helpers and helpers[1])
    assert set(old) == set(new) == {"a", "b", "c", "side"}
    assert all(old.values()) and all(new.values())
    assert {k for k in old if old[k] != new[k]} == changed


def test_pandas_cell_changes_the_hash():
    import pandas as pd

    df = pd.DataFrame({"a": [1.0, 2.0, 3.0], "b": ["x", "y", "z"]})
    edited = df.copy()
    edited.loc[1, "b"] = "w"
    f = dask.delayed(len, pure=True)
    old = task_hashes(f(df, dask_key_name="n"))["n"]
    assert old == task_hashes(f(df.copy(), dask_key_name="n"))["n"]
    assert old != task_hashes(f(edited, dask_key_name="n"))["n"]


def test_namespace_changes_every_hash():
    x = dask.delayed(sum, pure=True)([1, 2], dask_key_name="x")
    assert task_hashes(x)["x"] != task_hashes(x, namespace="other")["x"]
    assert task_hashes(x)["x"] == task_hashes(x, namespace="default")["x"]


# -- volatile tasks ------------------------------------------------------------------------


def test_unhashable_argument_makes_task_and_descendants_volatile():
    lock = threading.Lock()
    a = dask.delayed(lambda lk: 1, pure=True)(lock, dask_key_name="a")
    b = dask.delayed(lambda x: x + 1, pure=True)(a, dask_key_name="b")
    c = dask.delayed(lambda: 5, pure=True)(dask_key_name="c")
    hashes = task_hashes([b, c])
    assert hashes["a"] is None and hashes["b"] is None
    assert hashes["c"] is not None


def test_annotate_cache_false_is_volatile_downstream():
    with dask.annotate(cache=False):
        a = dask.delayed(lambda: 1, pure=True)(dask_key_name="a")
    b = dask.delayed(lambda x: x + 1, pure=True)(a, dask_key_name="b")
    hashes = task_hashes(b)
    assert hashes == {"a": None, "b": None}


def test_cache_version_replaces_code_hashing():
    def make(body_result, version):
        @cache_version(version)
        def step(x):
            return x + body_result

        return dask.delayed(step, pure=True)(1, dask_key_name="s")

    assert task_hashes(make(1, "1"))["s"] == task_hashes(make(2, "1"))["s"]
    assert task_hashes(make(1, "1"))["s"] != task_hashes(make(1, "2"))["s"]


def test_cache_version_annotation_overrides_code():
    def make(offset, version):
        def step(x):
            return x + offset

        with dask.annotate(cache_version=version):
            return dask.delayed(step, pure=True)(1, dask_key_name="s")

    assert task_hashes(make(1, "v1"))["s"] == task_hashes(make(2, "v1"))["s"]
    assert task_hashes(make(1, "v1"))["s"] != task_hashes(make(1, "v2"))["s"]


def test_a_library_upgrade_changes_tasks_that_only_receive_its_objects(monkeypatch):
    """``scale`` names no library, but what ``x * 0.1`` gives for a float32 array is
    numpy's business (NEP 50 changed it), and what ``df.groupby`` gives is pandas'."""
    import pandas as pd

    import client_lib.hashing.fingerprints
    import client_lib.hashing.numpy_values

    def scale(x):
        return x * 0.1

    def hashed():
        arr = dask.delayed(scale, pure=True)(np.ones(3, "f4"), dask_key_name="arr")
        one = dask.delayed(scale, pure=True)(np.float32(1), dask_key_name="one")
        df = dask.delayed(scale, pure=True)(pd.DataFrame({"v": [1.0]}), dask_key_name="df")
        return task_hashes([arr, one, df])

    before = hashed()
    monkeypatch.setattr(client_lib.hashing.numpy_values, "_NUMPY", b"numpy==99.0")  # upgrade
    numpy_upgraded = hashed()
    assert all(before[k] != numpy_upgraded[k] for k in ("arr", "one", "df"))
    real = client_lib.hashing.fingerprints.library_version
    monkeypatch.setattr(client_lib.hashing.fingerprints, "library_version",
                        lambda top: "pandas==99.0" if top == "pandas" else real(top))
    pandas_upgraded = hashed()
    assert pandas_upgraded["df"] != numpy_upgraded["df"]
    assert pandas_upgraded["arr"] == numpy_upgraded["arr"]


def test_frompyfunc_ufunc_is_volatile_not_stale():
    def double(x):
        return x * 2

    ufunc = np.frompyfunc(double, 1, 1)  # hides `double`: nothing to fingerprint
    hashes = task_hashes(dask.delayed(ufunc, pure=True)(3, dask_key_name="u"))
    assert hashes == {"u": None}
    library = task_hashes(dask.delayed(np.add, pure=True)(3, 4, dask_key_name="u"))
    assert library["u"] is not None


def test_relative_file_name_stands_for_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "table.csv").write_text("v\n1\n")

    def hashed():
        return task_hashes(dask.delayed(len, pure=True)("table.csv", dask_key_name="n"))["n"]

    first = hashed()
    assert hashed() == first
    (tmp_path / "table.csv").write_text("v\n22\n")
    assert hashed() != first
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "table.csv").write_bytes((tmp_path / "table.csv").read_bytes())
    os.utime(other / "table.csv", ns=(os.stat(tmp_path / "table.csv").st_mtime_ns,) * 2)
    edited = hashed()
    monkeypatch.chdir(other)  # same name, same size and mtime, another file
    assert hashed() != edited


# A helper edit must reach every collection API that takes a user function.
API_PIPELINE = """
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd

K = {k}

def f(x):
    return x * K

def build():
    x = da.ones((20, 20), chunks=10)
    b = db.from_sequence(range(10), npartitions=2)
    df = dd.from_pandas(pd.DataFrame({{"g": np.arange(20) % 3, "v": np.arange(20.0)}}),
                        npartitions=2)
    return {expr}
"""

API_EXPRESSIONS = {
    "map_blocks": "x.map_blocks(f).sum()",
    "map_overlap": "x.map_overlap(f, depth=1).sum()",
    "blockwise": "da.blockwise(f, 'ij', x, 'ij').sum()",
    "apply_along_axis": "da.apply_along_axis(lambda r: f(r).sum(), 0, x)",
    "array reduction": "da.reduction(x, lambda a, axis, keepdims: f(a).sum(axis=axis, "
                       "keepdims=keepdims), lambda a, axis, keepdims: a.sum(axis=axis, "
                       "keepdims=keepdims), dtype=float)",
    "bag.map": "b.map(f).sum()",
    "bag.filter": "b.filter(lambda v: f(v) > 3).count()",
    "bag.foldby": "b.foldby(lambda v: v % 2, lambda a, v: a + f(v), 0)",
    "bag.reduction": "b.reduction(lambda p: sum(map(f, p)), sum)",
    "map_partitions": "df.map_partitions(lambda p: p.assign(v=f(p.v)))",
    "series.apply": "df.v.apply(f, meta=('v', float))",
    "groupby.apply": "df.groupby('g').v.apply(lambda s: f(s.sum()), meta=('v', float))",
    "custom aggregation": "df.groupby('g').v.agg(dd.Aggregation('s', lambda s: f(s.sum()), "
                          "lambda s: s.sum()))",
    "assign callable": "df.assign(w=lambda d: f(d.v))",
    "to_delayed": "dask.delayed(sum)([dask.delayed(f)(v) for v in x.to_delayed().ravel()])",
}


@pytest.mark.parametrize("expr", list(API_EXPRESSIONS.values()), ids=list(API_EXPRESSIONS))
def test_helper_edit_reaches_every_collection_api(tmp_path, expr):
    def hashes(k: int) -> dict:
        source = "import dask\n" + API_PIPELINE.format(k=k, expr=expr)
        return _load(tmp_path, f"k{k}", source, None, build=lambda module, dask: module.build())

    before, after = hashes(2), hashes(3)
    assert None not in before.values()
    assert set(before.values()) != set(after.values())
    # The output (last in dependency order) depends on f, so its hash changes.
    assert list(before.values())[-1] != list(after.values())[-1]


def test_compiled_user_code_is_identified_by_its_file(tmp_path, monkeypatch):
    """An extension module outside site-packages is user code without bytecode: a
    rebuild (a new file) must change the hash. xxhash's compiled core, copied into a
    user directory, stands in for one."""
    import shutil

    import xxhash

    (source,) = Path(xxhash.__file__).parent.glob("_xxhash*")
    shutil.copy(source, tmp_path / source.name)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "_xxhash", raising=False)
    import _xxhash

    assert Path(_xxhash.__file__).parent == tmp_path

    # Its types name the xxhash package as their module; a type of the copied module:
    compiled_type = type("Digest", (), {"__module__": "_xxhash"})

    def hashed():
        func = dask.delayed(_xxhash.xxh3_128_hexdigest, pure=True)(b"x", dask_key_name="f")
        cls = dask.delayed(compiled_type, pure=True)(dask_key_name="c")
        return task_hashes([func, cls])

    before = hashed()
    assert None not in before.values() and hashed() == before
    os.utime(_xxhash.__file__, ns=(1, 1))  # rebuilt
    after = hashed()
    assert after["f"] != before["f"] and after["c"] != before["c"]
    monkeypatch.delitem(sys.modules, "_xxhash")
