"""Fault campaign 1: SIGKILL the server during concurrent stores of arrays and blobs.

Each round starts the server (embedded Redis) on one data directory, stores a batch of
values from ``workers`` threads while readers fetch already acknowledged entries, and
kills the server with SIGKILL after a random moment. After the last round: every entry the
server acknowledged (201/200) must still be indexed, every indexed entry must load and
verify, nothing wrong may have been served at any time, and ``gc`` (server stopped) must
leave no temporary directories and no unreferenced objects behind.

    python -m tests.stress.kill_restart --rounds 20 --stores 100 --workers 16
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from cache_server.launch import start_server
from tests.stress._common import (
    Value,
    campaign_parser,
    entry_hashes,
    make_values,
    print_report,
    run_cli,
    store,
    store_batch,
    verify,
)

__all__ = ["leftovers", "run"]


def leftovers(data_dir: Path) -> dict[str, int]:
    """Temporary paths and object directories under ``data_dir/objects``."""
    objects = data_dir / "objects"
    temporary = [p for p in objects.glob("*/.tmp/*")] + list(objects.glob("*/??/*/.sidecar.json.*"))
    dirs = [p for p in objects.glob("*/??/*") if p.is_dir()]
    return {"temporary": len(temporary), "object_dirs": len(dirs)}


def _round(data_dir: Path, values: list[Value], workers: int, rng: random.Random,
           acked: dict[str, Value], counts: dict[str, int], batch: int) -> None:
    server = start_server(data_dir)
    stop = threading.Event()
    first_ack = threading.Event()
    lock = threading.Lock()

    def writer(group: list[Value]) -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            statuses = (store_batch(client, group) if batch else [store(client, group[0])])
        with lock:
            for value, status in zip(group, statuses, strict=True):
                counts["stores_attempted"] += 1
                if status in (200, 201):
                    acked[value.task_hash] = value
                    first_ack.set()
                elif status != 0:
                    counts["unexpected_status"] += 1

    def reader() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            while not stop.is_set():
                with lock:
                    known = list(acked.values())
                if not known:
                    time.sleep(0.01)
                    continue
                value = rng.choice(known)
                try:
                    result = verify(client, [value.task_hash], {value.task_hash: value})
                except httpx.HTTPError:
                    return  # the server was killed
                with lock:
                    counts["reads"] += 1
                    counts["wrong_served"] += result["wrong"]

    readers = [threading.Thread(target=reader) for _ in range(2)]
    for thread in readers:
        thread.start()
    with ThreadPoolExecutor(workers) as pool:
        size = batch or 1
        futures = [pool.submit(writer, values[i:i + size]) for i in range(0, len(values), size)]
        # Kill while stores are in flight, but only once one was acknowledged: on a loaded
        # machine a fixed delay can end before the server has answered anything.
        first_ack.wait(timeout=120)
        time.sleep(rng.uniform(0.0, 0.5))
        os.kill(server.pid, signal.SIGKILL)
        counts["kills"] += 1
        for future in futures:
            future.result()
    stop.set()
    for thread in readers:
        thread.join()
    server.process.wait()
    server.stop()


def run(data_dir: Path, *, rounds: int, stores: int, workers: int, seed: int = 0,
        batch: int = 0) -> dict[str, Any]:
    """Run the campaign on ``data_dir``; returns the figures (see the module docstring).
    ``batch``: store small values only, that many per ``POST /v1/objects/batch``."""
    rng = random.Random(seed)
    acked: dict[str, Value] = {}
    counts = dict.fromkeys(("stores_attempted", "kills", "reads", "wrong_served",
                            "unexpected_status"), 0)
    for n in range(rounds):
        values = make_values(stores, seed * 1000 + n, zarr_every=0 if batch else 4)
        _round(data_dir, values, workers, rng, acked, counts, batch)
    before_gc = leftovers(data_dir)
    with start_server(data_dir) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        indexed = entry_hashes(c)
        after_restart = verify(c, indexed, acked)
    gc_report = run_cli("gc", "--data-dir", str(data_dir))
    after_gc = leftovers(data_dir)
    with start_server(data_dir) as server, httpx.Client(base_url=server.url, timeout=60) as c:
        indexed_after_gc = entry_hashes(c)
        after_gc_verify = verify(c, indexed_after_gc, acked)
    return {
        **counts,
        "acknowledged": len(acked),
        "indexed": len(indexed),
        "lost": len(set(acked) - set(indexed)),
        "verified_after_restart": after_restart["verified"],
        "wrong_after_restart": after_restart["wrong"],
        "missing_after_restart": after_restart["missing"],
        "temporary_before_gc": before_gc["temporary"],
        "object_dirs_before_gc": before_gc["object_dirs"],
        "gc": gc_report,
        "temporary_after_gc": after_gc["temporary"],
        "object_dirs_after_gc": after_gc["object_dirs"],
        "indexed_after_gc": len(indexed_after_gc),
        "verified_after_gc": after_gc_verify["verified"],
    }


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--stores", type=int, default=100, help="concurrent stores per round")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--batch", type=int, default=0,
                        help="small values only, this many per batch request (0: PUT each)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir) / "data", rounds=args.rounds, stores=args.stores,
                     workers=args.workers, seed=args.seed, batch=args.batch)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("kill_restart", report)


if __name__ == "__main__":
    main()
