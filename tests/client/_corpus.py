"""A corpus of Dask computations, each built deterministically from scratch.

Run as a script it computes every entry with ``cached_compute`` and pickles the results
and cache reports, so tests can run the corpus cold and warm in fresh processes:

    python -m tests.client._corpus URL NAMESPACE OUT.pkl [--scheduler threads] [--h5 PATH]

(``--scheduler``: a named Dask scheduler, ``local-cluster``, or ``ray`` for the Ray
cluster at ``RAY_ADDRESS``. ``--routed``: through ``dask.compute`` with ``client_lib.enable``
instead, on the collections' default scheduler or the cluster's default client.)

The IO entries read files next to the HDF5 file (``_corpus_values.write_inputs``).
"""

from __future__ import annotations

import argparse
import functools
import operator
import os
import pickle
import sys
from collections.abc import Callable

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import dask.multiprocessing
import numpy as np
import pandas as pd

from tests.client._corpus_values import ENTRIES
from tests.client._corpus_xarray import ENTRIES as XARRAY_ENTRIES

CORPUS: dict[str, Callable[[dict], object]] = {}


def entry(func: Callable[[dict], object]) -> Callable[[dict], object]:
    CORPUS[func.__name__] = func
    return func


def _x():
    return np.random.default_rng(7).random((60, 40))


def _arr():
    return da.from_array(_x(), chunks=(20, 20))


def _pdf():
    rng = np.random.default_rng(3)
    return pd.DataFrame({
        "key": np.arange(120) % 9,
        "name": [f"n{i % 5}" for i in range(120)],
        "value": rng.random(120),
        "count": np.arange(120, dtype="int64"),
    })


def _ddf():
    return dd.from_pandas(_pdf(), npartitions=4)


def add(a, b):
    return a + b


def square(x):
    return x * x


# -- delayed -----------------------------------------------------------------------------


@entry
def delayed_chain(ctx):
    return dask.delayed(square)(dask.delayed(add)(1, 2))


@entry
def delayed_pure_tree(ctx):
    leaves = [dask.delayed(square, pure=True)(i) for i in range(8)]
    return dask.delayed(sum, pure=True)(leaves)


@entry
def delayed_nout(ctx):
    pair = dask.delayed(divmod, nout=2)(17, 5)
    return dask.delayed(add)(pair[0], pair[1])


@entry
def delayed_dict_result(ctx):
    return dask.delayed(dict)(a=dask.delayed(square)(3), b=[1, 2])


@entry
def delayed_kwargs(ctx):
    return dask.delayed(np.linspace)(0, 1, num=dask.delayed(add)(3, 4))


@entry
def delayed_many_outputs(ctx):
    return [dask.delayed(square)(i) for i in range(5)]


@entry
def delayed_nested_containers(ctx):
    return {"x": dask.delayed(add)(1, 1), "y": (dask.delayed(square)(4), "literal")}


@entry
def delayed_partial_and_method(ctx):
    shifted = dask.delayed(functools.partial(add, 10), pure=True)(5)
    return dask.delayed(np.arange(12.0).reshape(3, 4).sum, pure=True)(axis=shifted % 2)


class Point:
    """A user class as a task argument (hashed by its code and its state)."""

    def __init__(self, x: float, y: float) -> None:
        self.x, self.y = x, y

    def norm(self) -> float:
        return float(np.hypot(self.x, self.y))


@entry
def delayed_object_and_frame_arguments(ctx):
    norm = dask.delayed(Point.norm)(Point(3.0, 4.0))
    return dask.delayed(lambda df, n: df.value.sum() * n)(_pdf(), norm)


# -- array -------------------------------------------------------------------------------


@entry
def array_sum(ctx):
    return _arr().sum()


@entry
def array_mean_axis(ctx):
    return _arr().mean(axis=0)


@entry
def array_slice(ctx):
    return _arr()[5:45:3, ::-2]


@entry
def array_rechunk(ctx):
    return _arr().rechunk((15, 40)).std(axis=1)


@entry
def array_map_blocks(ctx):
    return _arr().map_blocks(np.sin).max()


@entry
def array_map_overlap(ctx):
    return _arr().map_overlap(lambda b: b - b.mean(), depth=2, boundary="reflect")


@entry
def array_matmul(ctx):
    a = _arr()
    return a.T @ a


@entry
def array_linalg_qr(ctx):
    q, r = da.linalg.qr(da.from_array(_x(), chunks=(20, 40)))
    return r


@entry
def array_random_seeded(ctx):
    return da.random.default_rng(11).normal(size=(50, 30), chunks=(25, 15)).sum(axis=0)


@entry
def array_cumsum(ctx):
    return _arr().cumsum(axis=1)[::7]


@entry
def array_where_argmax(ctx):
    a = _arr()
    return da.where(a > 0.5, a, 0).argmax(axis=0)


@entry
def array_concatenate_stack(ctx):
    a = _arr()
    return da.stack([a[:10], a[10:20]]).sum(axis=0) + da.concatenate([a[:5], a[5:10]])


@entry
def array_ints_and_bools(ctx):
    a = da.arange(100, chunks=30)
    return (a % 7 == 0), a.astype("int16").cumprod(axis=0)


@entry
def array_datetimes(ctx):
    base = np.datetime64("2026-01-01", "s") + np.arange(40).astype("timedelta64[h]")
    return da.from_array(base, chunks=10).max()


@entry
def array_strings(ctx):
    return da.from_array(np.array(["alpha", "beta", "gamma", "delta"] * 5), chunks=6)[::3]


@entry
def array_h5py(ctx):
    import h5py

    dset = h5py.File(ctx["h5"], "r")["data"]
    return da.from_array(dset, chunks=10).sum()


@entry
def array_h5py_slice(ctx):
    import h5py

    dset = h5py.File(ctx["h5"], "r")["data"]
    return da.from_array(dset, chunks=(5, 5))[::2, 3:].mean(axis=1)


@entry
def array_linalg_svd(ctx):
    _, s, _ = da.linalg.svd(da.from_array(_x(), chunks=(20, 40)))
    return s


@entry
def array_linalg_norm_and_projection(ctx):
    a = da.from_array(_x(), chunks=(20, 40))
    q, _ = da.linalg.tsqr(a)
    return da.linalg.norm(a, axis=1), (q.T @ a).sum(axis=0)


@entry
def array_tensordot_transpose(ctx):
    a = _arr()
    return da.tensordot(a, a, axes=([0], [0])).T[::5]


@entry
def array_random_legacy_seed(ctx):
    return da.random.RandomState(5).random_sample((40, 10), chunks=10).mean(axis=1)


@entry
def array_topk_unique(ctx):
    a = (_arr() * 100).astype("int64")
    return da.topk(a.ravel(), 5), da.unique(a[:, 0] % 7)


@entry
def array_map_blocks_drop_axis(ctx):
    return _arr().map_blocks(lambda b: b.sum(axis=1), drop_axis=1, dtype=float)


@entry
def array_reshape(ctx):
    return _arr().reshape(60, 4, 10)[::4].sum(axis=2)


@entry
def array_large_chunks(ctx):
    # Big enough that the server keeps it as a Zarr array.
    return da.ones((512, 512), chunks=(256, 512), dtype="float64") * 3.0


# -- dataframe ---------------------------------------------------------------------------


@entry
def dataframe_groupby(ctx):
    return _ddf().groupby("key").value.mean()


@entry
def dataframe_groupby_agg(ctx):
    return _ddf().groupby("name").agg({"value": "sum", "count": "max"})


@entry
def dataframe_merge(ctx):
    left = _ddf()
    right = dd.from_pandas(pd.DataFrame({"key": np.arange(9), "w": np.arange(9.0) * 2}),
                           npartitions=2)
    return left.merge(right, on="key")[["count", "w"]]


@entry
def dataframe_set_index(ctx):
    return _ddf().set_index("count")


@entry
def dataframe_map_partitions(ctx):
    return _ddf().map_partitions(lambda p: p.assign(double=p.value * 2))


@entry
def dataframe_filter_sum(ctx):
    df = _ddf()
    return df[df.value > 0.3]["count"].sum()


@entry
def dataframe_strings(ctx):
    return _ddf().name.str.upper().value_counts()


@entry
def dataframe_describe_like(ctx):
    df = _ddf()
    return df.value.min(), df.value.max(), df["count"].mean()


@entry
def dataframe_groupby_apply(ctx):
    return _ddf().groupby("key").apply(lambda g: g.value.sum() * len(g),
                                       meta=("value", "f8"))


@entry
def dataframe_rolling(ctx):
    return _ddf().value.rolling(5).mean()


@entry
def dataframe_drop_duplicates_nunique(ctx):
    df = _ddf()
    return df[["key", "name"]].drop_duplicates(), df.name.nunique()


@entry
def dataframe_sort_values(ctx):
    return _ddf().sort_values("value")


@entry
def dataframe_merge_on_index(ctx):
    right = dd.from_pandas(pd.DataFrame({"w": np.arange(9.0)}, index=np.arange(9)),
                           npartitions=2)
    return _ddf().set_index("key").join(right, how="inner").w.sum()


# -- bag ---------------------------------------------------------------------------------


@entry
def bag_map_filter_sum(ctx):
    return db.from_sequence(range(50), npartitions=5).map(square).filter(
        lambda v: v % 3).sum()


@entry
def bag_frequencies(ctx):
    return db.from_sequence(list("abracadabra") * 3, npartitions=3).frequencies()


@entry
def bag_foldby(ctx):
    return db.from_sequence(range(30), npartitions=3).foldby(lambda v: v % 4, operator.add,
                                                            0)


@entry
def bag_to_list(ctx):
    return db.from_sequence([{"a": i, "b": str(i)} for i in range(10)],
                            npartitions=2).pluck("b")


@entry
def bag_to_dataframe(ctx):
    meta = pd.DataFrame({"a": pd.Series(dtype="int64"), "b": pd.Series(dtype="float64")})
    return db.from_sequence([{"a": i, "b": float(i) / 3} for i in range(12)],
                            npartitions=3).to_dataframe(meta=meta)  # no compute to build


@entry
def bag_flatten_topk(ctx):
    return db.from_sequence([[i, i * 2] for i in range(15)], npartitions=3).flatten().topk(4)


@entry
def bag_fold_distinct(ctx):
    b = db.from_sequence([i % 6 for i in range(30)], npartitions=3)
    return b.fold(operator.add), b.distinct().count()


CORPUS.update(ENTRIES)  # IO functions and subtle values (issue 10)
CORPUS.update(XARRAY_ENTRIES)  # xarray (issue 18)


def build(name: str, ctx: dict) -> object:
    return CORPUS[name](ctx)


def _process_pool():
    """A process pool as ``dask.multiprocessing.get`` makes one for a call."""
    from concurrent.futures import ProcessPoolExecutor
    from functools import partial

    from dask.multiprocessing import CPU_COUNT, get_context, initialize_worker_process

    if os.environ.get("PYTHONHASHSEED") in (None, "0"):
        os.environ["PYTHONHASHSEED"] = "6640"  # as Dask does, for its workers' hashes
    return ProcessPoolExecutor(CPU_COUNT, mp_context=get_context(),
                               initializer=partial(initialize_worker_process,
                                                   user_initializer=None))


def main(argv: list[str] | None = None) -> int:
    from client_lib import cached_compute, last_report

    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("namespace")
    parser.add_argument("out")
    parser.add_argument("--scheduler", default="threads")
    parser.add_argument("--h5", default=None)
    parser.add_argument("--only", nargs="*", default=None)
    # Every output is stored whatever it costs (auto skips large results that compute
    # faster than they load), so a warm run loads every output: the corpus is about values;
    # the policy has its own tests (tests/client/test_policy.py, test_load_speeds.py).
    parser.add_argument("--policy", default="outputs")
    parser.add_argument("--routed", action="store_true")
    args = parser.parse_args(argv)
    ctx = {"h5": args.h5}
    scheduler: object = args.scheduler
    client = None
    if args.scheduler == "ray":  # the Ray cluster at RAY_ADDRESS (tests/client/test_ray.py)
        import ray
        from ray.util.dask import ray_dask_get

        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
        scheduler = ray_dask_get
    if args.scheduler == "local-cluster":
        from distributed import Client, LocalCluster

        client = Client(LocalCluster(n_workers=2, threads_per_worker=1,
                                     dashboard_address=":0"))
        scheduler = client
    pool = None
    if args.routed:
        import client_lib

        client_lib.enable(cache=args.url, namespace=args.namespace, policy=args.policy)
        # Bags keep their default, the process pool: one for all entries, as Dask makes
        # it (spawned, seeded), not one per call (~2.5 s each here); the pool Dask makes
        # per call has its own test (test_routing.py, test_bags_keep_their_default_...).
        pool = _process_pool()
    results = {}
    for name in args.only or CORPUS:
        if args.routed:
            collection = build(name, ctx)
            # (``pool`` is read by the threaded scheduler too: set for the bags only.)
            bag = getattr(collection, "__dask_scheduler__", None) is dask.multiprocessing.get
            with dask.config.set(pool=pool if bag else None):
                (value,) = dask.compute(collection)
        else:
            (value,) = cached_compute(build(name, ctx), cache=args.url,
                                      namespace=args.namespace, scheduler=scheduler,
                                      policy=args.policy)
        report = last_report()
        results[name] = (value, {
            "tasks": report.tasks, "hits": report.hits, "loaded": report.loaded,
            "computed": report.computed, "volatile": report.volatile,
            "fallback": report.fallback, "stored": report.stored,
        })
    if client is not None:
        client.close()
    if pool is not None:
        pool.shutdown()
    with open(args.out, "wb") as f:
        pickle.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
