"""``open_cached`` (issue 12 part 3): cached collections reopened lazily, verified when
read, and a clear error for what is not cached."""

from __future__ import annotations

import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import dask
import dask.array as da
import dask.dataframe as dd
import httpx
import numpy as np
import pandas as pd
import pytest

from client_lib import (
    CacheEntryCorrupt,
    CacheEntryUntrusted,
    NotCached,
    cached_compute,
    cached_persist,
    open_cached,
)
from tests.server.wire import encode_array, put

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def store_everything():
    """These results are cheap to compute: ``auto`` would rightly not store them (it stores
    large results only when they pay back, tests/client/test_load_speeds.py)."""
    with dask.config.set({"result-cache.policy": "all"}):
        yield


def big_array() -> da.Array:
    """~3 MiB of float64, 4 dask chunks: cached as one Zarr array."""
    return da.random.default_rng(5).random((400, 1000), chunks=(100, 1000)) * 3.0


def frame() -> dd.DataFrame:
    pdf = pd.DataFrame({"a": np.arange(400), "b": np.arange(400.0) / 7})
    return dd.from_pandas(pdf, npartitions=4).map_partitions(lambda f: f.assign(c=f.a * 2))


def test_a_cached_array_reopens_lazily_over_its_zarr_store(cache_server):
    ns = uuid.uuid4().hex
    (expected,) = cached_compute(big_array(), cache=cache_server.url, namespace=ns)
    lazy = open_cached(big_array(), cache=cache_server.url, namespace=ns)
    assert isinstance(lazy, da.Array) and lazy.shape == expected.shape
    assert all(name.startswith("open-cached-") for name, *_ in lazy.__dask_keys__()[0])
    np.testing.assert_array_equal(lazy[150:170, 3:9].compute(), expected[150:170, 3:9])
    np.testing.assert_array_equal(lazy.compute(), expected)


@pytest.mark.slow
def test_chunks_are_verified_when_read(fresh_server):
    server = fresh_server()
    ns = uuid.uuid4().hex
    cached_compute(big_array(), cache=server.url, namespace=ns)
    lazy = open_cached(big_array(), cache=server.url, namespace=ns)
    (chunk,) = (server.data_dir / "objects" / "zarr").glob("*/*/c/*/*")
    raw = bytearray(chunk.read_bytes())
    raw[8] ^= 0x01
    chunk.write_bytes(bytes(raw))
    with pytest.raises(CacheEntryCorrupt):
        lazy[:10].compute()


@pytest.mark.slow
def test_a_replaced_entry_is_refused_at_open(fresh_server):
    """Someone with a write token but without the signing key replaces the entry: the
    signature is checked when the array is opened, before anything is read."""
    server = fresh_server()
    ns = uuid.uuid4().hex
    with dask.config.set({"result-cache.signing-key": secrets.token_hex(32)}):
        (expected,) = cached_compute(big_array(), cache=server.url, namespace=ns)
        with httpx.Client(base_url=server.url) as client:
            (entry,) = [e for e in client.get("/v1/entries").json()["entries"]
                        if e["shape"] == [400, 1000]]
            assert client.delete(f"/v1/entries/{entry['hash']}").status_code == 204
            poison = encode_array(np.full(expected.shape, 666.0))
            assert put(client, entry["hash"], poison).status_code == 201
        with pytest.raises(CacheEntryUntrusted):
            open_cached(big_array(), cache=server.url, namespace=ns)
    assert httpx.get(f"{server.url}/v1/stats").json()["untrusted"] == 1


def test_dataframes_reopen_from_their_result_or_their_partitions(cache_server):
    ns = uuid.uuid4().hex
    (expected,) = cached_compute(frame(), cache=cache_server.url, namespace=ns,
                                 policy="outputs")
    whole = open_cached(frame(), cache=cache_server.url, namespace=ns)
    assert isinstance(whole, dd.DataFrame) and whole.npartitions == 1
    pd.testing.assert_frame_equal(whole.compute(), expected)

    ns = uuid.uuid4().hex
    cached_persist(frame(), cache=cache_server.url, namespace=ns)
    parts = open_cached(frame(), cache=cache_server.url, namespace=ns)
    assert parts.npartitions == 4 and parts.divisions == frame().divisions
    pd.testing.assert_frame_equal(parts.compute(), expected)
    assert parts["c"].sum().compute() == expected["c"].sum()


@pytest.mark.parametrize("dtype", ["M8[s]", "m8[ms]", "M8[ns]", "M8", "m8"])
def test_datetime_arrays_reopen_over_their_zarr_store(cache_server, dtype):
    """Issue 27, case 8: numpy exports no buffer of datetimes, so a chunk of one could
    not be checked against its digest (``cannot include dtype 'M' in a buffer``)."""
    ns = uuid.uuid4().hex
    x = da.arange(200_000, chunks=50_000).astype(dtype)  # 1.6 MB: one Zarr array
    (expected,) = cached_compute(x, cache=cache_server.url, namespace=ns)
    lazy = open_cached(x, cache=cache_server.url, namespace=ns)
    assert all(name.startswith("open-cached-") for name, *_ in lazy.__dask_keys__())
    value = lazy.compute()
    assert value.dtype == expected.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(value, expected)
    np.testing.assert_array_equal(lazy[70_000:70_010].compute(), expected[70_000:70_010])


def test_a_small_array_reopens_over_a_load(cache_server):
    ns = uuid.uuid4().hex
    small = da.arange(100, chunks=10) * 2
    (expected,) = cached_compute(small, cache=cache_server.url, namespace=ns)
    np.testing.assert_array_equal(
        open_cached(small, cache=cache_server.url, namespace=ns).compute(), expected)


def test_what_is_not_cached_is_a_clear_error_naming_the_task(cache_server):
    ns = uuid.uuid4().hex
    with pytest.raises(NotCached, match=r"4 of 4 outputs .* the task 'mul' with key "
                       r"\('mul-[0-9a-f]+', 0, 0\)"):
        open_cached(big_array(), cache=cache_server.url, namespace=ns)
    with pytest.raises(TypeError, match="takes a dask collection"):
        open_cached(np.arange(3), cache=cache_server.url)


@pytest.mark.slow
def test_opened_in_a_fresh_process_and_computed_on_a_local_cluster(cache_server):
    """Stored by one process, reopened by another and computed on its cluster's workers."""
    ns = uuid.uuid4().hex
    (expected,) = cached_compute(big_array(), cache=cache_server.url, namespace=ns)
    script = (
        "import sys, numpy as np\n"
        "from distributed import Client, LocalCluster\n"
        "from client_lib import open_cached\n"
        "from tests.client.test_open_cached import big_array\n"
        "with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=':0') as c,"
        " Client(c) as client:\n"
        "    lazy = open_cached(big_array(), cache=sys.argv[1], namespace=sys.argv[2])\n"
        "    np.save(sys.argv[3], lazy[::7].compute())\n"
    )
    out = Path(f"/tmp/open-cached-{ns}.npy")
    try:
        subprocess.run([sys.executable, "-c", script, cache_server.url, ns, str(out)],
                       cwd=ROOT, check=True, timeout=300)
        np.testing.assert_array_equal(np.load(out), expected[::7])
    finally:
        out.unlink(missing_ok=True)
