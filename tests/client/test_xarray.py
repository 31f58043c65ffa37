"""xarray through ``cached_compute`` (issue 18): what ``ds.compute()`` returns, hits, file
edits, array chunks stored as Zarr arrays like dask arrays' chunks, and ``open_cached``
reopening a computed Dataset or DataArray lazily. The corpus
(``_corpus_xarray``) runs the same kinds of expressions cold and warm in fresh processes;
the mutation suite edits files, functions and coordinates."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from dask.base import is_dask_collection

from client_lib import NotCached, cached_compute, last_report, open_cached, task_hashes
from tests.client._corpus_xarray import NETCDF_ENGINE, dataset


def _open(path: Path) -> xr.Dataset:
    return xr.open_dataset(path, engine=NETCDF_ENGINE, chunks={"time": 4})


def test_netcdf_dataset_equals_compute_then_loads(cache_server, tmp_path):
    path = tmp_path / "in.nc"
    dataset().to_netcdf(path, engine=NETCDF_ENGINE)
    ns = uuid.uuid4().hex
    expr = _open(path).groupby("time.day").mean()
    expected = expr.compute()
    (cold,) = cached_compute(expr, cache=cache_server.url, namespace=ns)
    (warm,) = cached_compute(_open(path).groupby("time.day").mean(), cache=cache_server.url,
                             namespace=ns)
    assert last_report().loaded == 1 and last_report().computed == 0
    for value in (cold, warm):
        assert isinstance(value, xr.Dataset)
        xr.testing.assert_identical(value, expected)


def test_editing_the_file_recomputes(cache_server, tmp_path):
    path = tmp_path / "in.nc"
    dataset().to_netcdf(path, engine=NETCDF_ENGINE)
    ns = uuid.uuid4().hex
    (before,) = cached_compute(_open(path).temp.sum(), cache=cache_server.url, namespace=ns)
    # Same path, same size; a new file moved into place, as the old one may still be open
    # in xarray's file cache (HDF5 refuses to write a file it holds open).
    dataset(offset=1.0).to_netcdf(tmp_path / "new.nc", engine=NETCDF_ENGINE)
    (tmp_path / "new.nc").replace(path)
    (after,) = cached_compute(_open(path).temp.sum(), cache=cache_server.url, namespace=ns)
    assert last_report().loaded == 0
    assert float(after) == pytest.approx(float(before) + dataset().temp.size)


def test_file_managers_hash_by_file_not_by_their_random_id(tmp_path):
    """Each ``open_dataset`` makes a file manager with a new random ``manager_id``."""
    path = tmp_path / "in.nc"
    dataset().to_netcdf(path, engine=NETCDF_ENGINE)
    first, second = task_hashes(_open(path).temp), task_hashes(_open(path).temp)
    assert None not in first.values()
    assert sorted(first.values()) == sorted(second.values())


def test_coordinates_are_part_of_the_result_hash():
    ds = dataset().chunk({"time": 4})
    relabelled = ds.assign_coords(x=["a", "b", "z"])
    shifted = ds.assign_coords(time=ds.time + pd.Timedelta("1h"))
    hashes = [set(task_hashes(d.temp * 2).values()) for d in (ds, relabelled, shifted)]
    assert hashes[0] != hashes[1] and hashes[0] != hashes[2] and hashes[1] != hashes[2]


def test_finalisation_hashes_by_chunk_contents_not_dask_names():
    """xarray's finalisation task holds its dataset, dask arrays inside, as a template;
    the array's name is a dask token (it differs between environments), its chunks are
    tasks of the graph: the hash follows the chunks' contents, never the name."""
    import dask.array as da

    def wrapped(values, name):
        data = da.from_array(np.asarray(values, dtype=float), chunks=2, name=name)
        return xr.DataArray(data, dims=["x"], coords={"x": range(4)}, name="v") * 2

    def final_hash(arr):
        hashes = task_hashes(arr)
        (final,) = [h for k, h in hashes.items() if "finalize" in str(k)]
        return final

    same = final_hash(wrapped([1, 2, 3, 4], "first"))
    assert same is not None
    assert final_hash(wrapped([1, 2, 3, 4], "second")) == same
    assert final_hash(wrapped([1, 2, 3, 5], "third")) != same


@pytest.mark.slow
def test_large_chunks_are_stored_as_zarr_arrays(fresh_server, tmp_path):
    data_dir = tmp_path / "server"
    server = fresh_server(data_dir=data_dir)
    values = np.random.default_rng(1).random((4, 200, 400))  # chunks of 640 KB x 2 = 1.3 MB
    ds = xr.Dataset({"v": (("t", "y", "x"), values)}).chunk({"t": 2})
    (cold,) = cached_compute(ds.v + 1, cache=server.url, namespace="z", policy="all")
    xr.testing.assert_identical(cold, (ds.v + 1).compute())
    zarr_objects = list((data_dir / "objects" / "zarr").glob("*/*/zarr.json"))
    assert len(zarr_objects) >= 2  # the two chunks of v + 1, as Zarr arrays


def test_open_cached_reopens_a_computed_dataset_lazily(cache_server):
    ns = uuid.uuid4().hex
    ds = dataset().chunk({"time": 4})
    expr = (ds * 2).mean("x")
    with pytest.raises(NotCached, match="not in the cache"):
        open_cached(expr, cache=cache_server.url, namespace=ns)
    cached_compute(expr, cache=cache_server.url, namespace=ns)
    lazy = open_cached(expr, cache=cache_server.url, namespace=ns)
    assert isinstance(lazy, xr.Dataset)
    assert all(is_dask_collection(lazy[name].data) for name in ("temp", "pres", "station"))
    hits = httpx.get(f"{cache_server.url}/v1/stats").json()["served"]
    xr.testing.assert_identical(lazy.compute(), expr.compute())
    assert httpx.get(f"{cache_server.url}/v1/stats").json()["served"] == hits + 1  # one load


def test_open_cached_reopens_a_computed_data_array_lazily(cache_server):
    ns = uuid.uuid4().hex
    expr = dataset().chunk({"time": 4}).temp.resample(time="1D").mean()
    cached_compute(expr, cache=cache_server.url, namespace=ns)
    lazy = open_cached(expr, cache=cache_server.url, namespace=ns)
    assert isinstance(lazy, xr.DataArray) and is_dask_collection(lazy.data)
    xr.testing.assert_identical(lazy.compute(), expr.compute())
