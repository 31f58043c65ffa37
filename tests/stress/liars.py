"""Campaign: uploads that lie, under a size cap (issue 11, items 3 and 6).

1. A cache capped at ``cap`` holds six entries of ``entry_mib``; a chunked ``PUT`` declares
   an array that fits the cap only by evicting them all and sends 16 bytes.
2. ``clients`` concurrent ``PUT`` s of one task hash with different bodies, ``races`` times:
   answers, objects left on disk, and bytes on disk against the bytes the cache counts.

    python -m tests.stress.liars --cap-mib 64 --entry-mib 8 --clients 16 --races 3
"""

from __future__ import annotations

import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from cache_server.launch import start_server
from tests.server.wire import Encoded, encode_array, new_hash, put
from tests.stress._common import campaign_parser, print_report

__all__ = ["disk_bytes", "object_dirs", "run", "same_hash_race"]

MiB = 2**20


def object_dirs(data_dir: Path) -> list[Path]:
    return [p for p in (data_dir / "objects").glob("*/??/*") if p.is_dir()]


def disk_bytes(data_dir: Path) -> int:
    """Bytes of every file under ``objects`` (published or temporary)."""
    return sum(p.stat().st_size for p in (data_dir / "objects").rglob("*") if p.is_file())


def same_hash_race(url: str, values: list[Encoded]) -> Counter[int]:
    """PUT each of ``values`` under one new task hash at once; the statuses."""
    task_hash = new_hash()
    barrier = threading.Barrier(len(values))

    def one(value: Encoded) -> int:
        with httpx.Client(base_url=url, timeout=120) as client:
            client.get("/healthz")  # connect before the barrier
            barrier.wait()
            return put(client, task_hash, value).status_code

    with ThreadPoolExecutor(len(values)) as pool:
        return Counter(pool.map(one, values))


def _liar(client: httpx.Client, cap: int, entry: int, rng: np.random.Generator
          ) -> dict[str, Any]:
    for _ in range(6):
        put(client, new_hash(), encode_array(rng.random(entry // 8)))
    before = client.get("/v1/stats").json()
    declared = {"shape": f"[{(cap - entry // 2) // 8}]"}
    status = put(client, new_hash(), encode_array(np.zeros(2)), stream=True,
                 overrides=declared).status_code
    after = client.get("/v1/stats").json()
    return {"declared_bytes": (cap - entry // 2) // 8 * 8, "sent_bytes": 16, "status": status,
            "entries_before": before["entries"], "entries_after": after["entries"],
            "evicted": after["evictions"] - before["evictions"]}


def run(data_dir: Path, *, cap_mib: int, entry_mib: int, clients: int, races: int,
        seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    cap, entry = cap_mib * MiB, entry_mib * MiB
    with start_server(data_dir, env={"RESULT_CACHE_MAX_BYTES": str(cap)}) as server, \
            httpx.Client(base_url=server.url, timeout=120) as client:
        liar = _liar(client, cap, entry, rng)
        statuses: Counter[int] = Counter()
        for _ in range(races):
            values = [encode_array(rng.random(entry // 8)) for _ in range(clients)]
            statuses.update(same_hash_race(server.url, values))
        time.sleep(0.5)  # let the losers' cleanup finish
        stats = client.get("/v1/stats").json()
    return {
        "cap": cap,
        "lying_put": liar,
        "race": {"clients": clients, "races": races,
                 "statuses": {str(k): v for k, v in sorted(statuses.items())},
                 "object_dirs": len(object_dirs(data_dir)), "entries": stats["entries"],
                 "disk_bytes": disk_bytes(data_dir), "counted_bytes": stats["stored_bytes"]},
    }


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--cap-mib", type=int, default=64)
    parser.add_argument("--entry-mib", type=int, default=8)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--races", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir) / "data", cap_mib=args.cap_mib, entry_mib=args.entry_mib,
                     clients=args.clients, races=args.races, seed=args.seed)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("liars", report)


if __name__ == "__main__":
    main()
