"""Direct writes from ``CacheClient.put`` (docs/design/data-plane.md, "Direct writes"): a process
that can write the server's storage stages large values there and has the server commit
them; one that cannot (a read-only mount) uploads over HTTP, and stops trying."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dask
import dask.array as da
import httpx
import numpy as np
import pytest

from client_lib import CacheClient, cached_compute, open_cached
from tests.conftest import FreshServer
from tests.server.wire import new_hash

pytestmark = pytest.mark.slow

KEY = "direct-write-test-key-0123456789abcdef"


def received_bytes(url: str) -> float:
    """Body bytes the server received over HTTP (its ``/metrics``)."""
    text = httpx.get(f"{url}/metrics").text
    found = re.search(r"^result_cache_received_bytes_total (\S+)$", text, re.M)
    return float(found.group(1)) if found else 0.0


def staging_requests(url: str) -> float:
    text = httpx.get(f"{url}/metrics").text
    return sum(float(v) for v in re.findall(
        r'^result_cache_http_requests_total\{method="POST",route="/v1/staging".*\} (\S+)$',
        text, re.M))


@contextmanager
def not_writable(directory: Path) -> Iterator[None]:
    """``directory`` refuses new entries, as a read-only mount of the cache volume does
    (root ignores permissions: the immutable attribute, which root must respect)."""
    directory.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(directory)], check=True)
    else:
        directory.chmod(0o555)
    try:
        with pytest.raises(OSError):
            (directory / "probe").mkdir()
        yield
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        else:
            directory.chmod(0o755)


@pytest.mark.parametrize("signed", [False, True], ids=["plain", "signed"])
def test_a_worker_that_sees_the_storage_writes_directly(fresh_server: FreshServer,
                                                        signed: bool) -> None:
    server = fresh_server()
    client = CacheClient(server.url, signing_key=KEY if signed else None)
    value = np.random.default_rng(0).random((5, 2**20 // 2))  # 20 MiB: two chunks
    task_hash = new_hash()
    before = received_bytes(server.url)
    assert client.put(task_hash, value, 1.0, "big")
    assert received_bytes(server.url) == before  # no body came over HTTP
    entry = client.entry(task_hash)
    assert entry["storage"] == "zarr" and entry["nbytes"] == value.nbytes
    for mode in ("never", "auto"):
        with dask.config.set({"result-cache.direct-read": mode}):
            np.testing.assert_array_equal(client.get(task_hash), value)
    assert not list((server.data_dir / "objects").glob("*/.staging/*"))
    with dask.config.set({"result-cache.direct-write": "never"}):
        other = new_hash()
        assert client.put(other, value + 1, 1.0, "big")
        assert received_bytes(server.url) == before + value.nbytes


def test_cached_compute_stores_large_results_directly_and_reopens_them(
        fresh_server: FreshServer) -> None:
    server = fresh_server()
    x = da.random.default_rng(1).random((8, 2**19), chunks=(4, 2**19))  # 16 MiB chunks
    ns = new_hash()
    client = CacheClient(server.url, signing_key=KEY)
    (cold,) = cached_compute(x + 1, cache=client, namespace=ns, policy="all",
                             scheduler="threads")
    assert received_bytes(server.url) < 2**20  # chunks and result (80 MiB) not uploaded
    lazy = open_cached(x + 1, cache=client, namespace=ns)
    np.testing.assert_array_equal(lazy.compute(), cold)


def test_a_worker_without_write_access_uploads_and_stops_trying(
        fresh_server: FreshServer) -> None:
    server = fresh_server()
    client = CacheClient(server.url)
    value = np.random.default_rng(2).random(3 * 2**20)  # 24 MiB
    staging_root = server.data_dir / "objects" / "zarr" / ".staging"
    with not_writable(staging_root):
        first, second = new_hash(), new_hash()
        assert client.put(first, value, 1.0, "big")
        assert client.put(second, value * 2, 1.0, "big")
        assert received_bytes(server.url) == 2 * value.nbytes  # both uploaded
        assert staging_requests(server.url) == 1  # the second did not ask again
        assert not list(staging_root.iterdir())
    np.testing.assert_array_equal(client.get(first), value)
    np.testing.assert_array_equal(client.get(second), value * 2)
