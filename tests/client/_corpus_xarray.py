"""Corpus entries over xarray (issue 18): dask-backed Datasets and DataArrays opened from
NetCDF and Zarr files with ``chunks=``, and built in memory; groupby, resample, rolling,
coarsen, weighted reductions, ``apply_ufunc`` and ``map_blocks``.

Merged into :data:`tests.client._corpus.CORPUS`. Entries that read files are named
``io_xarray_*``; :func:`write_inputs` writes those files next to the other IO inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import pandas as pd
import xarray as xr

__all__ = ["ENTRIES", "NETCDF_ENGINE", "dataset", "write_inputs"]

ENTRIES: dict[str, Callable[[dict], object]] = {}
NETCDF_ENGINE = "h5netcdf"


def _entry(func: Callable[[dict], object]) -> Callable[[dict], object]:
    ENTRIES[func.__name__] = func
    return func


def dataset(offset: float = 0.0) -> xr.Dataset:
    """Six-hourly temperatures and pressures on a small grid, for four days."""
    time = pd.date_range("2000-01-01", periods=16, freq="6h")
    values = np.arange(16 * 4 * 3, dtype="f8").reshape(16, 4, 3) / 7 + offset
    return xr.Dataset(
        {"temp": (("time", "y", "x"), values, {"units": "K"}),
         "pres": (("time", "y", "x"), 1000 - values, {"units": "hPa"})},
        coords={"time": time, "y": [10.0, 20.0, 30.0, 40.0], "x": ["a", "b", "c"],
                "station": ("y", np.array([3, 1, 4, 1]))},
        attrs={"title": "corpus"},
    )


def _dir(ctx: dict) -> str:
    return ctx.get("data") or os.path.dirname(ctx["h5"])


def write_inputs(directory: str | os.PathLike) -> None:
    """The NetCDF and Zarr files of the ``io_xarray_*`` entries, in ``directory``."""
    directory = os.fspath(directory)
    ds = dataset()
    ds.to_netcdf(os.path.join(directory, "x.nc"), engine=NETCDF_ENGINE)
    # Zarr format 2 with consolidated metadata, as xarray writes by default: the variables
    # are listed in one order in every process (without consolidated metadata, zarr 3
    # lists a group's arrays in the order their metadata reads complete, which moves the
    # finalising task's arguments: docs/correctness.md, xarray).
    ds.chunk({"time": 4}).to_zarr(os.path.join(directory, "x.zarr"), mode="w",
                                  zarr_format=2, consolidated=True)
    for i in range(2):
        ds.isel(time=slice(8 * i, 8 * i + 8)).to_netcdf(
            os.path.join(directory, f"x-part{i}.nc"), engine=NETCDF_ENGINE)


def _netcdf(ctx: dict) -> xr.Dataset:
    return xr.open_dataset(os.path.join(_dir(ctx), "x.nc"), engine=NETCDF_ENGINE,
                           chunks={"time": 4})


def _zarr(ctx: dict, time_chunk: int = 4) -> xr.Dataset:
    return xr.open_dataset(os.path.join(_dir(ctx), "x.zarr"), engine="zarr",
                           chunks={"time": time_chunk})


def _chunked() -> xr.Dataset:
    return dataset().chunk({"time": 4, "y": 2})


def anomaly(values: np.ndarray) -> np.ndarray:
    return values - values.mean(axis=-1, keepdims=True)


def scaled(block: xr.Dataset) -> xr.Dataset:
    return block * 2 + 1


# -- from files -----------------------------------------------------------------------------


@_entry
def io_xarray_netcdf_dataset(ctx):
    return _netcdf(ctx)


@_entry
def io_xarray_netcdf_groupby(ctx):
    return _netcdf(ctx).groupby("time.day").mean()


@_entry
def io_xarray_netcdf_resample(ctx):
    return _netcdf(ctx).temp.resample(time="1D").max()


@_entry
def io_xarray_zarr_dataset(ctx):
    return _zarr(ctx)


@_entry
def io_xarray_zarr_rolling(ctx):
    # One block of four stored chunks: a graph small enough for the value probe's walk
    # (tests/client/_hash_probe.py stops at 400 values; rolling makes many tasks).
    return _zarr(ctx, time_chunk=16).pres.rolling(time=3, center=True).mean()


@_entry
def io_xarray_zarr_apply_ufunc(ctx):
    return xr.apply_ufunc(anomaly, _zarr(ctx).temp, input_core_dims=[["x"]],
                          output_core_dims=[["x"]], dask="parallelized",
                          output_dtypes=["f8"])


@_entry
def io_xarray_open_mfdataset(ctx):
    paths = [os.path.join(_dir(ctx), f"x-part{i}.nc") for i in range(2)]
    return xr.open_mfdataset(paths, engine=NETCDF_ENGINE, combine="by_coords").temp.sum(
        "time")


# -- in memory ------------------------------------------------------------------------------


@_entry
def xarray_arithmetic_and_coords(ctx):
    ds = _chunked()
    return (ds.temp - ds.temp.mean("time")).where(ds.station > 1)


@_entry
def xarray_coarsen_and_weighted(ctx):
    ds = _chunked()
    weights = xr.DataArray([1.0, 2.0, 3.0, 4.0], dims="y", coords={"y": ds.y})
    return ds.coarsen(time=2).mean(), ds.temp.weighted(weights).mean("y")


@_entry
def xarray_groupby_bins_sel(ctx):
    ds = _chunked()
    return ds.pres.sel(x=["a", "c"]).groupby_bins("y", [0, 25, 50]).sum()


@_entry
def xarray_map_blocks(ctx):
    return xr.map_blocks(scaled, _chunked())


@_entry
def xarray_reduction_scalar(ctx):
    return _chunked().temp.std()
