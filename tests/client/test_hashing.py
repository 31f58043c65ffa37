"""Task hashes: stable across processes, sensitive to exactly what can change a result."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import dask
import h5py
import numpy as np
import pytest

from client_lib import cache_version, task_hashes
from tests.client._corpus import CORPUS
from tests.client._corpus_values import write_inputs
from tests.correctness._mutations import CASES
from tests.correctness._projects import EVERYTHING, MAIN, imported_project, key_name

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def h5_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("h5") / "data.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(200.0).reshape(20, 10)  # the corpus needs 2-d
    write_inputs(path.parent)
    return str(path)


@pytest.fixture(scope="module")
def probes(h5_file) -> tuple[dict, dict]:
    """The task hashes and value digests (``--both``) printed by two fresh interpreter
    processes with other PYTHONHASHSEEDs. They are independent: both run at once."""
    processes = [subprocess.Popen(
        [sys.executable, "-m", "tests.client._hash_probe", h5_file, "--both"], cwd=ROOT,
        env={**os.environ, "PYTHONHASHSEED": seed}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True) for seed in ("1", "12345")]
    try:
        outputs = []
        for process in processes:
            out, err = process.communicate(timeout=120)
            assert process.returncode == 0, err[-3000:]
            outputs.append(json.loads(out))
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs[0], outputs[1]


@pytest.mark.slow
def test_hashes_equal_across_processes_and_hash_seeds(probes):
    first, second = (probe["hashes"] for probe in probes)
    assert first == second
    assert len(first) >= 15 + len(CORPUS)
    for name, hashes in first.items():
        assert "volatile" not in hashes, name
        assert all(len(h) == 32 for h in hashes), name


@pytest.mark.slow
def test_every_handler_and_dask_tokenize_is_stable_across_processes(probes):
    """Each value the corpus's graphs hold, hashed on its own in two fresh processes with
    other hash seeds: a handler or ``__dask_tokenize__`` that mixes in the process (an
    fsspec filesystem's, a lock's random name) shows up here by type."""
    first, second = (probe["values"] for probe in probes)
    assert first.keys() == second.keys()
    for name in first:
        assert first[name] == second[name], (name, sorted(
            set(first[name]) ^ set(second[name])))
    kinds = {entry.partition(":")[0] for digests in first.values() for entry in digests}
    # The corpus reaches the values whose own tokens were per process (issue 10, item 14).
    for kind in ("fsspec.implementations.local.LocalFileSystem",
                 "dask.utils.SerializableLock", "pandas.DataFrame", "numpy.ndarray"):
        assert kind in kinds, kind
    assert sum(len(d) for d in first.values()) > 200


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


# -- what changes a hash: the catalogue of code edits, at the level of hashes ----------------

# Cases that install a library version run only in fresh processes (tests/correctness).
IN_PROCESS = [case for case in CASES if case.library is None]


def _project_hashes(directory: Path, namespace: str) -> dict:
    """The task hashes of the project's ``pipe.build()``, by key in dependency order."""
    with imported_project(str(directory)) as pipe:
        return task_hashes(*pipe.build(), namespace=namespace)


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.slug for c in IN_PROCESS])
def test_an_edit_changes_exactly_the_hashes_of_what_must_recompute(tmp_path, case):
    directory = tmp_path / case.slug
    case.write(directory)
    before = _project_hashes(directory, "default")
    if case.edit_data is not None:
        gc.collect()  # the collections go, and with them the files they opened (HDF5)
    case.apply_edit(directory)
    after = _project_hashes(directory, "edited" if case.new_namespace else "default")
    assert None not in before.values() and None not in after.values()

    def side(hashes: dict) -> dict:
        return {k: h for k, h in hashes.items() if key_name(k).startswith("side")}

    def main(hashes: dict) -> list:
        return [h for k, h in hashes.items() if not key_name(k).startswith("side")]

    if case.recompute == frozenset():  # the same hashes, whatever Dask names the keys
        assert sorted(before.values()) == sorted(after.values())
        return
    if isinstance(case.recompute, frozenset):
        assert set(before) == set(after)
        changed = {key_name(k) for k in before if before[k] != after[k]}
        assert changed == case.recompute
        return
    if case.recompute == EVERYTHING:
        assert not set(before.values()) & set(after.values())
        return
    assert side(before) == side(after) and side(before)  # the untouched branch
    if case.recompute == MAIN:
        assert not set(main(before)) & set(main(after))
    elif not case.same_result:
        assert main(before)[-1] != main(after)[-1]  # the edited branch's output


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


def test_a_delayed_object_held_as_a_value_is_volatile():
    """``traverse=False`` hands the task the Delayed object itself (by identity, its key
    random): never cached. A ``@dask.delayed`` function held as a value (a method's class
    attribute) counts by what it calls."""
    inner = dask.delayed(lambda: 1)()
    kept = dask.delayed([inner, 2], traverse=False, pure=True)
    assert set(task_hashes(kept).values()) == {None}

    @dask.delayed
    def plus(x):
        return x + 1

    holder = dask.delayed(lambda f: f, pure=True)(plus, dask_key_name="holder")
    assert task_hashes(holder)["holder"] is not None


def test_a_container_that_failed_to_hash_is_hashed_again_where_it_recurs():
    """Two tasks share an argument tuple holding a lock: both are volatile. (The tuple
    stayed on the encoder's cycle guard after the first failed, and the second task
    hashed it as a back reference: without the array beside the lock, a stale hit.)"""
    lock = threading.Lock()

    def build(values):
        shared = (lock, values)
        first = dask.delayed(lambda t: 1, pure=True)(shared, dask_key_name="first")
        second = dask.delayed(lambda t, k: 2, pure=True)(shared, 7, dask_key_name="second")
        return [first, second]

    assert task_hashes(build(np.arange(3))) == {"first": None, "second": None}


def test_a_value_no_handler_foresaw_makes_its_task_volatile_not_the_run_fail():
    class Broken:
        def __reduce_ex__(self, protocol):
            return (Broken,)  # pickle itself would refuse it

    ok = dask.delayed(lambda: 1, pure=True)(dask_key_name="ok")
    bad = dask.delayed(lambda b: 2, pure=True)(Broken(), dask_key_name="bad")
    hashes = task_hashes([ok, bad])
    assert hashes["bad"] is None and hashes["ok"] is not None


def test_annotate_cache_false_is_volatile_downstream():
    with dask.annotate(cache=False):
        a = dask.delayed(lambda: 1, pure=True)(dask_key_name="a")
    b = dask.delayed(lambda x: x + 1, pure=True)(a, dask_key_name="b")
    hashes = task_hashes(b)
    assert hashes == {"a": None, "b": None}


def test_cache_annotations_survive_the_fusion_of_array_and_bag_layers():
    """Dask's blockwise fusion drops layer annotations (issue 27, case 11): the cache's
    own are put back on the tasks they were made for."""
    import dask.array as da
    import dask.bag as db

    from client_lib.plan.materialize import materialize, unfuse

    x = da.ones((30, 30), chunks=10)
    with dask.annotate(cache=False):
        y = x.map_blocks(_step("1"))
    hashes = task_hashes((y + 1).sum())
    layers = {k: key_name(k).partition("~")[0] for k in hashes}  # inner tasks' own names
    assert any(h is None for k, h in hashes.items() if layers[k].startswith("step-"))
    upstream = [h for k, h in hashes.items() if layers[k].startswith("ones_like-")
                and "step" not in layers[k]]  # not the fused tasks named after all layers
    assert upstream and None not in upstream
    with dask.annotate(cache=False):
        bag = db.from_sequence(range(4), npartitions=2).map(_step("1"))
    assert all(h is None for h in task_hashes(bag.sum()).values())
    with dask.annotate(cache_ttl="5s"):
        y = x.map_blocks(_step("1"))
    m = unfuse(materialize([(y + 1).sum()]))
    annotated = m.annotations["cache_ttl"]
    assert len(annotated) == 9 and set(annotated.values()) == {"5s"}
    assert all(key_name(k).startswith("step") for k in annotated)


def _step(body: str):
    """A function ``step`` whose code (not a closure cell) differs by ``body``."""
    namespace: dict = {}
    exec(f"def step(x):\n    return x + {body}\n", namespace)
    return namespace["step"]


def test_cache_version_replaces_code_hashing():
    def make(body, version):
        return dask.delayed(cache_version(version)(_step(body)), pure=True)(
            1, dask_key_name="s")

    assert task_hashes(make("1", "1"))["s"] == task_hashes(make("2", "1"))["s"]
    assert task_hashes(make("1", "1"))["s"] != task_hashes(make("1", "2"))["s"]


def test_cache_version_annotation_overrides_code():
    def make(body, version):
        with dask.annotate(cache_version=version):
            return dask.delayed(_step(body), pure=True)(1, dask_key_name="s")

    assert task_hashes(make("1", "v1"))["s"] == task_hashes(make("2", "v1"))["s"]
    assert task_hashes(make("1", "v1"))["s"] != task_hashes(make("1", "v2"))["s"]


def test_a_version_replaces_code_but_not_closure_cells():
    """Issue 10, items 7-9: bound state is no code; the version stands for code only."""

    def make(offset, annotate):
        def step(x):
            return x + offset

        if annotate:
            with dask.annotate(cache_version="v1"):
                return dask.delayed(step, pure=True)(1, dask_key_name="s")
        return dask.delayed(cache_version("v1")(step), pure=True)(1, dask_key_name="s")

    for annotate in (False, True):
        assert task_hashes(make(1, annotate))["s"] != task_hashes(make(2, annotate))["s"]


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


def _scale(x, factor, meta=None):
    return x * factor


def test_a_family_member_hashes_as_it_would_alone():
    """Tasks of one function are hashed as a family (its head once, members from their
    dependencies' digests; an argument they share encoded once per pass): every member
    gets the hash it gets alone, in a graph where no shortcut applies (an annotation
    anywhere sends every task through the general path), and after its shared argument
    changes."""
    import pandas as pd

    meta = pd.DataFrame({"a": [1.0, 2.0]})
    leaves = [dask.delayed(_scale, pure=True)(i, 2, dask_key_name=f"leaf-{i}")
              for i in range(6)]
    shared = [dask.delayed(_scale, pure=True)(leaf, 3, meta, dask_key_name=f"meta-{i}")
              for i, leaf in enumerate(leaves)]
    family = task_hashes(shared)
    assert None not in family.values() and len(family) == 12
    for i in (0, 5):
        alone = task_hashes(shared[i])
        assert alone[f"meta-{i}"] == family[f"meta-{i}"]
        assert alone[f"leaf-{i}"] == family[f"leaf-{i}"]
    with dask.annotate(cache_version="1"):
        marked = dask.delayed(_scale, pure=True)(1, 1, dask_key_name="marked")
    general = task_hashes([*shared, marked])
    assert {k: general[k] for k in family} == family
    # Per pass: the shared argument is read again in the next one.
    meta.iloc[0, 0] = 5.0
    edited = task_hashes(shared)
    assert all(edited[f"meta-{i}"] != family[f"meta-{i}"] for i in range(6))
    assert all(edited[f"leaf-{i}"] == family[f"leaf-{i}"] for i in range(6))
    assert len(set(family.values())) == 12


def test_equal_column_labels_hash_once_per_pass_and_as_they_do_alone() -> None:
    # Small string indexes are encoded once per hashing pass (a frame's partitions each
    # carry a copy of its columns): a task must hash in a graph of many as it does alone,
    # and labels that differ only by dtype or names must still tell the frames apart.
    import pandas as pd

    from tests.client._value_hash import identity, value_hash

    def frame(columns: pd.Index) -> pd.DataFrame:
        return pd.DataFrame([[1, 2]], columns=columns)

    variants = [pd.Index(["a", "b"], dtype=object), pd.Index(["a", "b"], dtype="str"),
                pd.Index(["a", "b"], dtype=pd.StringDtype("python")),
                pd.Index(["a", "b"], dtype=object, name="n"), pd.Index(["a", "c"]),
                pd.Index([1, 2]), pd.Index(["a", "b"], dtype=object)]
    frames = [frame(c) for c in variants]
    tasks = [dask.delayed(identity, pure=True)(f, dask_key_name=f"t{i}")
             for i, f in enumerate(frames)]
    together = task_hashes(*tasks)
    alone = [value_hash(f) for f in frames]
    assert [together[f"t{i}"] for i in range(len(frames))] == alone
    assert len(set(alone)) == len(alone) - 1 and alone[0] == alone[-1]
