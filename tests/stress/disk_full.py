"""Fault campaign 5: no room. A size cap of a few MB, and a disk that really fills up.

``run_cap``: a server with ``max_bytes`` takes ``stores`` values worth several times the cap:
stores evict (cost-aware), objects larger than the cap get 507, a cache full of pinned
entries gets 507, reads keep working, and the stored bytes never exceed the cap.

``run_full_disk``: the data directory on a small tmpfs (or, where mounting is not allowed,
a file-size limit on the server process: EFBIG instead of ENOSPC): stores succeed until the
disk is full, then fail cleanly with 507; earlier entries still load and verify, and no
temporary files are left behind.

    python -m tests.stress.disk_full --cap 4MiB --stores 400
"""

from __future__ import annotations

import contextlib
import resource
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from cache_server.launch import RunningServer, start_server
from cache_server.settings import parse_size
from tests.server.wire import put
from tests.stress._common import (
    campaign_parser,
    make_values,
    print_report,
    store,
    verify,
)
from tests.stress.kill_restart import leftovers

__all__ = ["run_cap", "run_full_disk", "small_disk"]


def run_cap(data_dir: Path, *, cap: int, stores: int, seed: int = 0,
            redis_url: str | None = None) -> dict[str, Any]:
    values = make_values(stores, seed, zarr_every=5, big_bytes=cap // 3)
    too_big = make_values(1, seed + 1, zarr_every=1, big_bytes=cap + 8)[0]
    statuses: Counter[int] = Counter()
    max_seen = 0
    env = {"RESULT_CACHE_MAX_BYTES": str(cap)}
    with start_server(data_dir, env=env, redis_url=redis_url,
                      redis_prefix="cap:" if redis_url else None) as server, \
            httpx.Client(base_url=server.url, timeout=60) as client:
        for n, value in enumerate(values):
            statuses[store(client, value, compute_seconds=(n % 7) + 0.5)] += 1
            max_seen = max(max_seen, client.get("/v1/stats").json()["stored_bytes"])
        over_cap = store(client, too_big)
        stats = client.get("/v1/stats").json()
        survivors = [v for v in values
                     if client.get(f"/v1/entries/{v.task_hash}").status_code == 200]
        reads = verify(client, [v.task_hash for v in survivors], {v.task_hash: v for v in values})
        for value in survivors:
            client.post(f"/v1/entries/{value.task_hash}/pin").raise_for_status()
        # Fits the cap, but only if pinned entries went: refused.
        room = cap - client.get("/v1/stats").json()["stored_bytes"]
        extra = make_values(1, seed + 2, zarr_every=1, big_bytes=room + 1)[0]
        pinned_full = put(client, extra.task_hash, extra.encoded)
        reads_when_full = verify(client, [v.task_hash for v in survivors],
                                 {v.task_hash: v for v in values})
    return {
        "cap": cap,
        "stores": stores,
        "bytes_offered": sum(len(v.encoded.body) for v in values),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "over_cap_status": over_cap,
        "evictions": stats["evictions"],
        "max_stored_bytes_seen": max_seen,
        "stored_bytes": stats["stored_bytes"],
        "entries": stats["entries"],
        "survivors_verified": reads["verified"],
        "full_of_pins_status": pinned_full.status_code,
        "full_of_pins_message": pinned_full.json()["detail"],
        "reads_verified_when_full": reads_when_full["verified"],
        "wrong_served": reads["wrong"] + reads_when_full["wrong"],
    }


@contextlib.contextmanager
def small_disk(path: Path, nbytes: int) -> Iterator[str]:
    """Mount a ``nbytes`` tmpfs on ``path``; yields ``"tmpfs"``, or ``"fsize"`` when
    mounting is not permitted (the caller then limits the server's file size)."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={nbytes}", "tmpfs",
                              str(path)], capture_output=True).returncode == 0
    try:
        yield "tmpfs" if mounted else "fsize"
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def _limit_file_size(server: RunningServer, nbytes: int) -> None:
    _, hard = resource.prlimit(server.pid, resource.RLIMIT_FSIZE)
    resource.prlimit(server.pid, resource.RLIMIT_FSIZE, (nbytes, hard))


def run_full_disk(path: Path, *, disk: int, stores: int, redis_url: str, seed: int = 0
                  ) -> dict[str, Any]:
    """``redis_url`` must point to a Redis outside the small disk."""
    values = make_values(stores, seed, zarr_every=4, big_bytes=disk // 4)
    statuses: Counter[int] = Counter()
    acked = {}
    with small_disk(path, disk) as how:
        with start_server(path / "data", redis_url=redis_url, redis_prefix="full:") as server:
            if how == "fsize":
                _limit_file_size(server, disk // 5)
            with httpx.Client(base_url=server.url, timeout=60) as client:
                details = set()
                for value in values:
                    response = put(client, value.task_hash, value.encoded)
                    statuses[response.status_code] += 1
                    if response.status_code == 201:
                        acked[value.task_hash] = value
                    elif response.status_code == 507:
                        details.add(response.json()["detail"][:60])
                reads = verify(client, list(acked), acked)
                healthy = client.get("/healthz").status_code
            left = leftovers(path / "data")
    return {
        "how": how,
        "disk": disk,
        "stores": stores,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "disk_full_messages": sorted(details)[:3],
        "acked_verified": reads["verified"],
        "wrong_served": reads["wrong"],
        "lost": reads["missing"],
        "temporary_left": left["temporary"],
        "healthz": healthy,
    }


def main() -> None:
    from tests._servers import RedisProcess

    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--cap", default="4MiB")
    parser.add_argument("--stores", type=int, default=400)
    parser.add_argument("--disk", default="8MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run_cap(Path(workdir) / "cap", cap=parse_size(args.cap), stores=args.stores,
                         seed=args.seed)
        report["seconds"] = round(time.monotonic() - started, 1)
        print_report("disk_full.cap", report)
        redis = RedisProcess(Path(workdir) / "redis")
        try:
            started = time.monotonic()
            report = run_full_disk(Path(workdir) / "disk", disk=parse_size(args.disk),
                                   stores=args.stores, redis_url=redis.url, seed=args.seed)
            report["seconds"] = round(time.monotonic() - started, 1)
        finally:
            redis.stop()
        print_report("disk_full.disk", report)


if __name__ == "__main__":
    main()
