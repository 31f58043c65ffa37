"""Corpus entries over Dask's IO functions and over values whose hashing is subtle
(issue 10): zones, pandas precision and units, object columns, paths inside frames.

Merged into :data:`tests.client._corpus.CORPUS`, so every corpus test (cold and warm in
fresh processes, hashes across processes and ``PYTHONHASHSEED``) covers them. The input
files live next to the corpus's HDF5 file: :func:`write_inputs` writes them.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable
from zoneinfo import ZoneInfo

import dask
import dask.array as da
import dask.bag as db
import dask.dataframe as dd
import numpy as np
import pandas as pd

from tests.client._corpus_xarray import write_inputs as write_xarray_inputs

__all__ = ["ENTRIES", "write_inputs"]

ENTRIES: dict[str, Callable[[dict], object]] = {}


def _entry(func: Callable[[dict], object]) -> Callable[[dict], object]:
    ENTRIES[func.__name__] = func
    return func


def _frame() -> pd.DataFrame:
    return pd.DataFrame({"k": np.arange(24) % 5, "v": np.arange(24.0) / 3,
                         "s": [f"s{i % 4}" for i in range(24)]})


def _dir(ctx: dict) -> str:
    return ctx.get("data") or os.path.dirname(ctx["h5"])


def write_corpus_files(directory: str | os.PathLike) -> str:
    """The corpus's HDF5 file (``ctx["h5"]``, returned) and the IO entries' inputs beside
    it, in ``directory``."""
    import h5py

    path = os.path.join(os.fspath(directory), "corpus.h5")
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(200.0).reshape(20, 10)
    write_inputs(directory)
    return path


def write_inputs(directory: str | os.PathLike) -> None:
    """The input files of the IO entries, in ``directory`` (the HDF5 file's)."""
    import zarr

    directory = os.fspath(directory)
    df = _frame()
    df.to_parquet(os.path.join(directory, "t.parquet"))
    df.to_csv(os.path.join(directory, "t.csv"), index=False)
    df.to_hdf(os.path.join(directory, "t.hdf"), key="df", format="table")
    store = zarr.storage.LocalStore(os.path.join(directory, "z.zarr"))
    z = zarr.create_array(store, shape=(40, 6), chunks=(10, 6), dtype="f8", overwrite=True)
    z[...] = np.arange(240.0).reshape(40, 6)
    for name in ("a", "b"):
        with open(os.path.join(directory, f"listed-{name}.txt"), "w") as f:
            f.write(name * 3)
    write_xarray_inputs(directory)


def _size(path) -> int:
    return os.path.getsize(path)


# -- IO functions ---------------------------------------------------------------------------


@_entry
def io_read_parquet(ctx):
    return dd.read_parquet(os.path.join(_dir(ctx), "t.parquet")).groupby("k").v.sum()


@_entry
def io_read_csv(ctx):
    return dd.read_csv(os.path.join(_dir(ctx), "t.csv"), blocksize=200).v.sum()


@_entry
def io_read_hdf(ctx):
    return dd.read_hdf(os.path.join(_dir(ctx), "t.hdf"), key="df").v.max()


@_entry
def io_from_zarr(ctx):
    return da.from_zarr(os.path.join(_dir(ctx), "z.zarr")).sum(axis=0)


@_entry
def io_from_array_zarr(ctx):
    import zarr

    z = zarr.open_array(os.path.join(_dir(ctx), "z.zarr"), mode="r")
    return da.from_array(z, chunks=(20, 3)).mean()


@_entry
def io_from_array_h5py_locked(ctx):
    import h5py

    dset = h5py.File(ctx["h5"], "r")["data"]
    return da.from_array(dset, chunks=5, lock=True).max()


@_entry
def io_read_text(ctx):
    return db.read_text(os.path.join(_dir(ctx), "t.csv"), blocksize=100).count()


# -- values ---------------------------------------------------------------------------------


@_entry
def value_zones(ctx):
    wall = datetime.datetime(2024, 1, 15, 9)
    stamps = [wall.replace(tzinfo=ZoneInfo(z)) for z in ("UTC", "Europe/London")]
    later = [pd.Timestamp("2024-01-15 09:00", tz="America/New_York"),
             pd.Timestamp("2024-01-15 09:00", tz=datetime.UTC)]
    return dask.delayed(lambda xs, ys: [str(x) for x in xs + ys], pure=True)(stamps, later)


@_entry
def value_pandas_units(ctx):
    ts = pd.Timestamp("2024-01-15 09:00:00.000000123")
    parts = [pd.Timedelta(100, "ns"), ts, ts.as_unit("s"), pd.Timedelta(3, "s").as_unit("ms")]
    return dask.delayed(lambda xs: [str(x) for x in xs], pure=True)(parts)


@_entry
def value_object_columns(ctx):
    frame = pd.DataFrame({"b": pd.Series([b"x", b"y"], dtype=object),
                          "s": pd.Series(["x", "y"], dtype=object),
                          "t": pd.Series(pd.to_datetime(["2024-01-15"] * 2))
                          .dt.tz_localize("Europe/London")})
    return dask.delayed(lambda f: f.astype(str).sum().tolist(), pure=True)(frame)


def _listed(ctx: dict) -> list[str]:
    return [os.path.join(_dir(ctx), f"listed-{n}.txt") for n in ("a", "b")]


@_entry
def value_listed_paths_frame(ctx):
    manifest = dd.from_pandas(pd.DataFrame({"path": _listed(ctx)}), npartitions=2)
    return manifest.path.map(_size, meta=("path", "int64")).sum()


@_entry
def value_listed_paths_array(ctx):
    return dask.delayed(lambda a: int(sum(map(_size, a))), pure=True)(np.array(_listed(ctx)))


# -- frames as Parquet (issue 12): exact round trips, and what falls back to pickle ----------


def _typed_frame() -> pd.DataFrame:
    """Every dtype family Parquet holds exactly, under a MultiIndex."""
    n = 12
    return pd.DataFrame({
        "tz": pd.date_range("2024-03-30 22:00", periods=n, freq="h", tz="Europe/Paris"),
        "naive": pd.date_range("2024-01-01", periods=n, freq="D").as_unit("ms"),
        "cat": pd.Categorical(list("abca") * 3, categories=list("cba"), ordered=True),
        "int": pd.array([1, None, 3] * 4, dtype="Int64"),
        "bool": pd.array([True, None, False] * 4, dtype="boolean"),
        "float": pd.array([0.5, None, -0.0] * 4, dtype="Float64"),
        "str": pd.array(["x", None, "z"] * 4, dtype="string"),
        "u8": np.arange(n, dtype="u8") + 2**63,
        "f4": np.linspace(0, 1, n, dtype="f4"),
        "td": pd.to_timedelta(np.arange(n), unit="s"),
    }, index=pd.MultiIndex.from_product([["a", "b", "c"], [10, 20, 30, 40]], names=["g", "n"]))


def _shifted(frame: pd.DataFrame) -> pd.DataFrame:
    out = frame.copy()
    out["int"] = out["int"] * 2
    return out


@_entry
def frame_parquet_dtypes(ctx):
    return dask.delayed(_shifted, pure=True)(_typed_frame())


@_entry
def frame_parquet_series(ctx):
    tz = _typed_frame()["tz"].reset_index(drop=True).rename("when")
    return dask.delayed(lambda s: s + pd.Timedelta("1s"), pure=True)(tz)


@_entry
def frame_parquet_partitions(ctx):
    flat = _typed_frame().reset_index(drop=True).drop(columns=["cat"])
    parts = dd.from_pandas(flat, npartitions=3)
    return parts.map_partitions(_shifted)


@_entry
def frame_pickle_fallback(ctx):
    # Parquet holds neither complex numbers nor a DatetimeIndex's freq: pickled, exact.
    frame = pd.DataFrame({"c": np.arange(4) * (1 + 2j)},
                         index=pd.date_range("2024-01-01", periods=4, freq="D"))
    return dask.delayed(lambda f: f * 2, pure=True)(frame)
