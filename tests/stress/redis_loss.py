"""Fault campaign 2: Redis restarts (append-only on), then loses its data entirely.

Stores ``entries`` values (some pinned) through a server on an external Redis with AOF,
restarts Redis and checks every entry is still indexed and loads; then stops the server,
deletes Redis's data, runs ``dask-cache reindex`` and checks that every entry, and every
pin, is back and verifies.

    python -m tests.stress.redis_loss --entries 1000
"""

from __future__ import annotations

import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from cache_server.launch import start_server
from tests._servers import RedisProcess
from tests.stress._common import (
    campaign_parser,
    entry_hashes,
    make_values,
    print_report,
    run_cli,
    store,
    verify,
)

__all__ = ["run"]

PREFIX = "loss:"


def _wait_healthy(client: httpx.Client, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while client.get("/healthz").status_code != 200:
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not recover from the Redis restart")
        time.sleep(0.1)


def run(workdir: Path, *, entries: int, pin_every: int = 10, seed: int = 0) -> dict[str, Any]:
    values = make_values(entries, seed, zarr_every=25)
    expected = {v.task_hash: v for v in values}
    pinned = {v.task_hash for v in values[::pin_every]}
    redis = RedisProcess(workdir / "redis", appendonly=True)
    data_dir = workdir / "data"
    try:
        with start_server(data_dir, redis_url=redis.url, redis_prefix=PREFIX) as server, \
                httpx.Client(base_url=server.url, timeout=60) as client:
            with ThreadPoolExecutor(8) as pool:
                statuses = list(pool.map(lambda v: store(client, v), values))
            for task_hash in pinned:
                client.post(f"/v1/entries/{task_hash}/pin").raise_for_status()
            redis.restart()
            _wait_healthy(client)
            after_restart = entry_hashes(client)
            restart_check = verify(client, after_restart, expected)
        redis.stop()
        shutil.rmtree(redis.directory)  # Redis loses everything
        redis = RedisProcess(workdir / "redis", appendonly=True)
        reindex_report = run_cli("reindex", "--data-dir", str(data_dir), "--redis-url",
                                 redis.url, "--redis-prefix", PREFIX)
        with start_server(data_dir, redis_url=redis.url, redis_prefix=PREFIX) as server, \
                httpx.Client(base_url=server.url, timeout=60) as client:
            restored = entry_hashes(client)
            restored_pins = {h for h in restored
                             if client.get(f"/v1/entries/{h}").json()["pinned"]}
            reindex_check = verify(client, restored, expected)
    finally:
        redis.stop()
    return {
        "entries": entries,
        "stored": sum(s == 201 for s in statuses),
        "pinned": len(pinned),
        "indexed_after_redis_restart": len(after_restart),
        "verified_after_redis_restart": restart_check["verified"],
        "lost_in_restart": len(set(expected) - set(after_restart)),
        "reindex": reindex_report,
        "restored": len(restored),
        "restored_pins": len(restored_pins & pinned),
        "wrong_pins": len(restored_pins ^ pinned),
        "verified_after_reindex": reindex_check["verified"],
        "lost_in_reindex": len(set(expected) - set(restored)),
    }


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir), entries=args.entries, seed=args.seed)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("redis_loss", report)


if __name__ == "__main__":
    main()
