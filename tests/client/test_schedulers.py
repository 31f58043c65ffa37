"""Every collection on the local schedulers the corpus does not run on (``sync``,
``processes``): one corpus entry per collection, cold equal to ``dask.compute`` on the
same scheduler, then loaded. The README's table of schedulers and collections cites
this module; threads and a LocalCluster run the whole corpus (test_cached_compute.py),
Ray runs one entry per collection (test_ray.py)."""

from __future__ import annotations

import multiprocessing
import uuid
from concurrent.futures import ProcessPoolExecutor

import dask
import h5py
import numpy as np
import pytest

from client_lib import cached_compute, last_report
from tests._compare import assert_same
from tests.client._corpus import build
from tests.client._corpus_values import write_inputs

pytestmark = pytest.mark.slow

ENTRIES = ["delayed_pure_tree", "array_map_overlap", "dataframe_groupby_agg", "bag_foldby",
           "io_xarray_netcdf_groupby", "xarray_map_blocks"]


@pytest.fixture(scope="module")
def ctx(tmp_path_factory) -> dict:
    path = tmp_path_factory.mktemp("schedulers") / "corpus.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(200.0).reshape(20, 10)
    write_inputs(path.parent)
    return {"h5": str(path)}


@pytest.fixture(scope="module")
def pool():
    """One pool of worker processes for every ``processes`` run (a pool per run spends
    seconds starting interpreters)."""
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        yield pool


@pytest.mark.parametrize("scheduler", ["sync", "processes"])
def test_each_collection_computes_then_loads(cache_server, ctx, request, scheduler):
    ns = uuid.uuid4().hex
    kwargs = {"pool": request.getfixturevalue("pool")} if scheduler == "processes" else {}
    for name in ENTRIES:
        (expected,) = dask.compute(build(name, ctx), scheduler=scheduler, **kwargs)
        (cold,) = cached_compute(build(name, ctx), cache=cache_server.url, namespace=ns,
                                 scheduler=scheduler, **kwargs)
        assert last_report().computed > 0 and last_report().fallback is None, name
        (warm,) = cached_compute(build(name, ctx), cache=cache_server.url, namespace=ns,
                                 scheduler=scheduler, **kwargs)
        assert last_report().computed == 0 and last_report().loaded >= 1, name
        assert_same(cold, expected, f"cold {name}")
        assert_same(warm, expected, f"warm {name}")
