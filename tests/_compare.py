"""Deep equality for computed results: arrays, frames, xarray objects, scalars, containers."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

__all__ = ["assert_same"]


RTOL = 1e-12  # BLAS and reductions on other processes may round the last bit differently


def assert_same(actual, expected, path: str = "result") -> None:
    """Assert ``actual`` equals ``expected`` in type and value: exactly, except floats to
    ``RTOL`` (NaN equals NaN); dataframe rows are compared after sorting, as shuffles may
    reorder them; xarray objects by values (to ``RTOL``), coordinates, names, dtypes and
    attributes, in any order of their variables (as ``identical``)."""
    xr = sys.modules.get("xarray")  # only an xarray computation can return xarray objects
    if xr is not None and isinstance(expected, xr.Dataset | xr.DataArray):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        xr.testing.assert_allclose(actual, expected, rtol=RTOL, atol=0)
        assert _xarray_layout(actual) == _xarray_layout(expected), path
        return
    if isinstance(expected, pd.DataFrame | pd.Series | pd.Index):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        if isinstance(expected, pd.Index):
            pd.testing.assert_index_equal(actual, expected)
            return
        sort = (lambda x: x.sort_index(kind="stable")) if expected.index.is_unique else (
            lambda x: x.sort_values(list(x.columns) if isinstance(x, pd.DataFrame) else None)
            .reset_index(drop=True))
        testing = (pd.testing.assert_frame_equal if isinstance(expected, pd.DataFrame)
                   else pd.testing.assert_series_equal)
        testing(sort(actual), sort(expected), obj=path, check_exact=False, rtol=RTOL)
    elif isinstance(expected, np.ndarray):
        assert isinstance(actual, np.ndarray), f"{path}: {type(actual)} is not an ndarray"
        assert actual.dtype == expected.dtype, f"{path}: {actual.dtype} != {expected.dtype}"
        if expected.dtype.kind in "fc":
            np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=0, err_msg=path)
        else:
            np.testing.assert_array_equal(actual, expected, err_msg=path)
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), path
        for k in expected:
            assert_same(actual[k], expected[k], f"{path}[{k!r}]")
    elif isinstance(expected, list | tuple):
        assert type(actual) is type(expected) and len(actual) == len(expected), path
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_same(a, e, f"{path}[{i}]")
    elif isinstance(expected, float | np.floating):
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        if np.isnan(expected):
            assert np.isnan(actual), f"{path}: {actual!r} is not NaN"
        else:
            assert actual == pytest.approx(expected, rel=RTOL, abs=0), path
    else:
        assert type(actual) is type(expected), f"{path}: {type(actual)} != {type(expected)}"
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _xarray_layout(obj) -> tuple:
    """What ``assert_allclose`` leaves out: dtypes, dimensions and attributes of every
    variable, the name, the object's attributes."""
    variables = obj.variables if hasattr(obj, "data_vars") else {
        **obj.coords.variables, None: obj.variable}
    return (getattr(obj, "name", None), dict(obj.attrs),
            {k: (v.dtype, v.dims, dict(v.attrs)) for k, v in variables.items()})
