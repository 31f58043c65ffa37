"""Direct reads (issue 12 part 2): a process that sees the server's storage reads objects
where they lie, verified, with no body over HTTP; anything wrong falls back to HTTP."""

from __future__ import annotations

import re
import secrets
import subprocess
import sys
import uuid
from pathlib import Path

import dask
import httpx
import numpy as np
import pandas as pd
import pytest

from cache_server.launch import start_server
from client_lib import cached_compute, last_report, task_hashes
from tests.server.wire import encode_array, put

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def store_everything():
    """These results are cheap to compute: ``auto`` would rightly not store them (it stores
    large results only when they pay back, tests/client/test_load_speeds.py)."""
    with dask.config.set({"result-cache.policy": "all"}):
        yield


def metric(server, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    match = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def counters(server) -> tuple[float, float]:
    """(bytes of object bodies sent over HTTP, objects located for direct reads)."""
    return metric(server, "result_cache_sent_bytes_total"), metric(
        server, "result_cache_located_total")


def array(n: int) -> np.ndarray:
    return np.random.default_rng(n).random((n, 1000))  # n * 8 kB: Zarr from 1 MiB


def frame(n: int) -> pd.DataFrame:
    return pd.DataFrame({"x": np.arange(n, dtype="float64"),
                         "c": pd.Categorical.from_codes(np.arange(n) % 3, ["a", "b", "c"])})


def summary(n: int) -> dict:
    return {"n": n}


def values(n: int) -> list:
    return [dask.delayed(array, pure=True)(n), dask.delayed(frame, pure=True)(n * 600),
            dask.delayed(summary, pure=True)(n)]


def test_direct_reads_send_no_body_over_http(cache_server):
    ns = uuid.uuid4().hex
    cold = cached_compute(*values(300), cache=cache_server.url, namespace=ns)
    sent, located = counters(cache_server)
    warm = cached_compute(*values(300), cache=cache_server.url, namespace=ns)
    assert last_report().loaded == 3
    np.testing.assert_array_equal(warm[0], cold[0])
    pd.testing.assert_frame_equal(warm[1], cold[1])
    assert warm[2] == cold[2]
    assert counters(cache_server) == (sent, located + 3)  # Zarr, Parquet and blob, in place

    with dask.config.set({"result-cache.direct-read": "never"}):
        again = cached_compute(*values(300), cache=cache_server.url, namespace=ns)
    np.testing.assert_array_equal(again[0], cold[0])
    now_sent, now_located = counters(cache_server)
    assert now_located == located + 3 and now_sent > sent


def test_a_bad_direct_read_setting_is_a_clear_error(cache_server):
    with dask.config.set({"result-cache.direct-read": "sometimes"}), pytest.raises(
            ValueError, match="result-cache.direct-read must be 'auto' or 'never'"):
        cached_compute(*values(1), cache=cache_server.url)


@pytest.mark.slow
def test_a_corrupt_chunk_is_never_served(fresh_server):
    """The direct read finds the digest wrong and falls back to HTTP; the server finds the
    same, drops the entry, and the task is recomputed."""
    server = fresh_server()
    ns = uuid.uuid4().hex
    task = dask.delayed(array, pure=True)(300, dask_key_name="a")
    cached_compute(task, cache=server.url, namespace=ns)
    (chunk,) = (server.data_dir / "objects" / "zarr").glob("*/*/c/*/*")
    raw = bytearray(chunk.read_bytes())
    raw[100] ^= 0xFF
    chunk.write_bytes(bytes(raw))
    sent, located = counters(server)
    (again,) = cached_compute(task, cache=server.url, namespace=ns)
    np.testing.assert_array_equal(again, array(300))
    assert last_report().retried == [task_hashes(task, namespace=ns)["a"]]
    assert counters(server)[1] == located + 1  # tried in place first


@pytest.mark.slow
def test_a_replaced_entry_is_refused_before_it_is_read(fresh_server):
    """With a signing key the signature in the entry's metadata is checked first: a
    mismatch is a miss counted as untrusted, as over HTTP."""
    server = fresh_server()
    ns = uuid.uuid4().hex
    task = dask.delayed(array, pure=True)(300, dask_key_name="a")
    with dask.config.set({"result-cache.signing-key": secrets.token_hex(32)}):
        cached_compute(task, cache=server.url, namespace=ns)
        task_hash = task_hashes(task, namespace=ns)["a"]
        with httpx.Client(base_url=server.url) as client:
            entry = client.get(f"/v1/entries/{task_hash}").json()
            assert client.delete(f"/v1/entries/{task_hash}").status_code == 204
            poison = encode_array(np.full((300, 1000), 666.0))
            assert put(client, task_hash, poison,
                       overrides={"signature": entry["signature"]}).status_code == 201
        (again,) = cached_compute(task, cache=server.url, namespace=ns)
    np.testing.assert_array_equal(again, array(300))
    assert last_report().untrusted == 1 and last_report().loaded == 0
    assert httpx.get(f"{server.url}/v1/stats").json()["untrusted"] == 1


def test_location_names_the_payload(cache_server):
    ns = uuid.uuid4().hex
    tasks = [dask.delayed(f, pure=True)(n, dask_key_name=f.__name__)
             for f, n in ((array, 200), (frame, 150_000), (summary, 1))]
    cached_compute(*tasks, cache=cache_server.url, namespace=ns)
    hashes = task_hashes(*tasks, namespace=ns)
    found = {}
    for name in ("array", "frame", "summary"):
        body = httpx.get(f"{cache_server.url}/v1/entries/{hashes[name]}/location").json()
        found[name] = (body["storage"], body["location"])
    root = (cache_server.data_dir / "objects").resolve().as_uri()
    assert found["array"][0] == "zarr" and found["array"][1].startswith(f"{root}/zarr/")
    assert found["frame"][0] == "parquet" and found["frame"][1].endswith("/data.parquet")
    assert found["summary"][0] == "blob" and found["summary"][1].endswith("/blob")
    missing = httpx.get(f"{cache_server.url}/v1/entries/{'0' * 32}/location")
    assert missing.status_code == 404


@pytest.mark.slow
def test_workers_of_a_local_cluster_read_in_place(cache_server, tmp_path):
    """A fresh process with a LocalCluster loads a cached array on its workers without a
    body over HTTP."""
    ns = uuid.uuid4().hex
    cached_compute(*values(250), cache=cache_server.url, namespace=ns)
    sent, located = counters(cache_server)
    script = (
        "import sys, numpy as np\n"
        "from distributed import Client, LocalCluster\n"
        "from client_lib import cached_compute, last_report\n"
        "from tests.client.test_direct_reads import values, array\n"
        "with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=':0') as c,"
        " Client(c) as client:\n"
        "    out = cached_compute(*values(250), cache=sys.argv[1], namespace=sys.argv[2],"
        " scheduler=client)\n"
        "    assert last_report().loaded == 3, last_report()\n"
        "    np.testing.assert_array_equal(out[0], array(250))\n"
    )
    subprocess.run([sys.executable, "-c", script, cache_server.url, ns], cwd=ROOT,
                   check=True, timeout=300)
    assert counters(cache_server) == (sent, located + 3)


@pytest.mark.slow
def test_objects_in_s3_are_read_in_place_with_credentials(tmp_path, redis_url, s3_url,
                                                          moto_s3, monkeypatch):
    env = {**moto_s3.env, "RESULT_CACHE_STORAGE_URL": s3_url}
    with start_server(tmp_path / "s3", redis_url=redis_url, env=env,
                      redis_prefix=f"test-{uuid.uuid4().hex[:8]}:") as server:
        ns = uuid.uuid4().hex
        cold = cached_compute(*values(300), cache=server.url, namespace=ns)
        sent, located = counters(server)
        warm = cached_compute(*values(300), cache=server.url, namespace=ns)
        assert last_report().loaded == 3
        np.testing.assert_array_equal(warm[0], cold[0])
        pd.testing.assert_frame_equal(warm[1], cold[1])
        assert counters(server) == (sent, located + 3)  # all three from the bucket
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")  # no credentials: over HTTP
        again = cached_compute(*values(300), cache=server.url, namespace=ns)
        np.testing.assert_array_equal(again[0], cold[0])
        assert counters(server)[0] > sent
