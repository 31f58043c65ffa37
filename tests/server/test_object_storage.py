"""The cache with its objects in S3 (moto's server on a local port): replicas on one bucket,
``gc`` and ``reindex`` on it, and a storage URL that names nothing is refused.
docs/design/storage.md, "Object storage"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import dask
import numpy as np
import pytest
import redis

from cache_server.launch import start_server
from cache_server.settings import Settings
from client_lib import CacheClient, cached_compute, last_report


def _cli(*args: str, env: dict[str, str]) -> dict:
    done = subprocess.run([sys.executable, "-m", "cache_server", *args, "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("url", ["ftp://x/y", "s3://", "file://host/x", "objects"])
def test_a_storage_url_that_names_no_storage_is_refused(url):
    with pytest.raises(ValueError, match="storage URL"):
        Settings(storage_url=url)


@pytest.mark.slow
def test_replicas_on_one_bucket_then_gc_and_reindex(tmp_path, redis_url, s3_url, moto_s3):
    prefix = f"test-{uuid.uuid4().hex[:8]}:"
    env = {**moto_s3.env, "RESULT_CACHE_STORAGE_URL": s3_url}
    replicas = [start_server(tmp_path / f"r{n}", redis_url=redis_url, redis_prefix=prefix,
                             env=env) for n in range(2)]  # no shared local directory
    try:
        ns = uuid.uuid4().hex
        big = dask.delayed(np.arange, pure=True)(300_000.0, dask_key_name="big")  # 2.4 MB
        small = dask.delayed(str, pure=True)("x" * 100, dask_key_name="small")
        cold = cached_compute(big, small, cache=replicas[0].url, namespace=ns, policy="all",
                              scheduler="threads")
        assert last_report().stored == 2
        warm = cached_compute(big, small, cache=replicas[1].url, namespace=ns,
                              scheduler="threads")
        assert last_report().loaded == 2
        np.testing.assert_array_equal(warm[0], cold[0])
        assert warm[1] == cold[1]
        import s3fs  # here, not at the top: importing it costs every collection ~0.7 s

        fs = s3fs.S3FileSystem(use_listings_cache=False)
        sidecars = fs.glob(f"{s3_url[5:]}/??/*/sidecar.json")
        assert len(sidecars) == 2
        assert CacheClient(replicas[0].url).stats() == CacheClient(replicas[1].url).stats()
    finally:
        for replica in replicas:
            replica.stop()
    # The index is lost; reindex rebuilds it from the bucket's sidecars, gc keeps it all.
    client = redis.Redis.from_url(redis_url)
    client.delete(*client.keys(f"{prefix}*"))
    maintenance = [f"--data-dir={tmp_path / 'nowhere'}", f"--redis-url={redis_url}",
                   f"--redis-prefix={prefix}"]  # no local directory needed
    env = {k: v for k, v in os.environ.items() if "RESULT_CACHE" not in k}
    env.update(moto_s3.env, RESULT_CACHE_STORAGE_URL=s3_url)
    assert _cli("reindex", *maintenance, env=env)["entries_added"] == 2
    fs.pipe_file(f"{s3_url[5:]}/ab/{'ab' * 16}/blob", b"an orphan")  # no sidecar: leftover
    report = _cli("gc", *maintenance, env=env)
    assert report["entries"] == 2 and report["dangling_entries_removed"] == 0
    assert report["temporary_removed"] == 1 and not fs.exists(f"{s3_url[5:]}/ab")
    assert not (tmp_path / "nowhere").exists()
    with start_server(tmp_path / "r2", redis_url=redis_url, redis_prefix=prefix,
                      env=env) as again:
        (value, _) = cached_compute(big, small, cache=again.url, namespace=ns,
                                    scheduler="threads")
        assert last_report().loaded == 2
        np.testing.assert_array_equal(value, cold[0])
