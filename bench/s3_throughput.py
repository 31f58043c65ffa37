"""Array store and load through a cache server whose objects live in S3 (moto's S3 server
on a local port, started here) against plain ``s3fs`` put and get of the same bytes to the
same endpoint, in the same run.

Service: ``CacheClient.put`` (encode, digest, HTTP streaming, the server's digest check,
multipart upload completed once verified, sidecar) and
``CacheClient.get`` over HTTP (the server reads and verifies the object, the client verifies
again), and the direct read a worker with credentials does (s3fs GET, digest check). Raw:
``s3fs`` writing the bytes in 64 MiB parts and ``cat_file`` reading them back. Ratios are
throughput, service / raw (higher is better). Target: store and load >= 0.5x.

    python bench/s3_throughput.py [--repeat 3] [--mib 1024] [--smoke]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import dask
import httpx
import numpy as np
from _harness import Ratio, cache_server, finish, parse_args

from client_lib import CacheClient

_PART = 64 * 2**20


def _options(parser) -> None:
    parser.add_argument("--mib", type=int, default=1024, help="array size in MiB")


@contextmanager
def moto_s3() -> Iterator[dict[str, str]]:
    """moto's S3 server on a free port; yields the AWS variables that point at it."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                "-p", str(port)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(url, timeout=2)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("moto did not start") from None
                time.sleep(0.1)
        yield {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
               "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": url}
    finally:
        process.terminate()
        process.wait(timeout=30)


def raw_put(fs, path: str, body: memoryview) -> None:
    with fs.open(path, "wb", block_size=_PART) as f:
        for start in range(0, body.nbytes, _PART):
            f.write(body[start:start + _PART])


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=3, extra=_options)
    mib = 8 if args.smoke else args.mib
    value = np.random.default_rng(0).random(mib * 2**20 // 8)
    body = memoryview(value).cast("B")
    gb = value.nbytes / 1e9
    t: dict[str, list[float]] = {"raw_put": [], "raw_get": [], "put": [], "get": [],
                                 "direct_get": []}
    with moto_s3() as aws:
        os.environ.update(aws)
        import s3fs

        fs = s3fs.S3FileSystem(use_listings_cache=False)
        fs.mkdir("raw")
        env = {**aws, "RESULT_CACHE_STORAGE_URL": "s3://cache/objects"}
        with cache_server(env=env) as server:
            client = CacheClient(server.url)
            client.stats()
            for _ in range(args.repeat):
                start = time.perf_counter()
                raw_put(fs, "raw/array", body)
                t["raw_put"].append(time.perf_counter() - start)
                start = time.perf_counter()
                back = fs.cat_file("raw/array")
                t["raw_get"].append(time.perf_counter() - start)
                assert len(back) == body.nbytes
                del back
                fs.rm_file("raw/array")

                task_hash = uuid.uuid4().hex
                start = time.perf_counter()
                assert client.put(task_hash, value, 1.0, "s3-throughput")
                t["put"].append(time.perf_counter() - start)
                for mode, name in (("never", "get"), ("auto", "direct_get")):
                    with dask.config.set({"result-cache.direct-read": mode}):
                        start = time.perf_counter()
                        loaded = client.get(task_hash)
                        t[name].append(time.perf_counter() - start)
                    if not np.array_equal(loaded, value):
                        raise RuntimeError("the loaded array differs from the stored one")
                    del loaded
                client.delete(task_hash)
    med = {k: statistics.median(v) for k, v in t.items()}
    print(f"{gb:.2f} GB  s3fs put {gb / med['raw_put']:.3f} GB/s  cache put "
          f"{gb / med['put']:.3f} GB/s  |  s3fs get {gb / med['raw_get']:.3f} GB/s  cache get "
          f"{gb / med['get']:.3f} GB/s  direct get {gb / med['direct_get']:.3f} GB/s")
    ratios = [
        Ratio("store_vs_s3fs_put", med["raw_put"] / med["put"], 0.5, higher_is_better=True),
        Ratio("load_vs_s3fs_get", med["raw_get"] / med["get"], 0.5, higher_is_better=True),
        Ratio("direct_load_vs_s3fs_get", med["raw_get"] / med["direct_get"], 0.5,
              higher_is_better=True),
    ]
    finish("s3_throughput", ratios, args, mib=mib, gb=gb, seconds=med, runs=t,
           gb_per_s={k: gb / v for k, v in med.items()})


if __name__ == "__main__":
    main()
