"""Fault campaign 4: many clients store the same task hash at the same moment.

``clients`` threads, each with its own connection, wait at a barrier and PUT the same hash
(once with a Zarr-sized array, once with a blob). Every answer must be 201 or 200, exactly
one 201, one entry and one object on disk, and the value must verify.

    python -m tests.stress.same_hash --clients 50 --rounds 20
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

from cache_server.launch import start_server
from tests.stress._common import Value, campaign_parser, make_values, print_report, store, verify

__all__ = ["run"]


def _race(url: str, value: Value, clients: int) -> Counter[int]:
    barrier = threading.Barrier(clients)

    def one(_: int) -> int:
        with httpx.Client(base_url=url, timeout=120) as client:
            client.get("/healthz")  # connect before the barrier
            barrier.wait()
            return store(client, value)

    with ThreadPoolExecutor(clients) as pool:
        return Counter(pool.map(one, range(clients)))


def run(data_dir: Path, *, clients: int, rounds: int, seed: int = 0) -> dict[str, Any]:
    statuses: Counter[int] = Counter()
    problems = 0
    values = make_values(2 * rounds, seed, zarr_every=2)  # alternately Zarr and blob
    with start_server(data_dir) as server, httpx.Client(base_url=server.url) as client:
        for value in values:
            race = _race(server.url, value, clients)
            statuses.update(race)
            manifest = client.get(f"/v1/entries/{value.task_hash}").json()
            digest = manifest["digest"]
            object_dirs = list((data_dir / "objects").glob(f"*/{digest[:2]}/{digest}"))
            checks = verify(client, [value.task_hash], {value.task_hash: value})
            if (race[201] != 1 or set(race) - {200, 201} or len(object_dirs) != 1
                    or checks["verified"] != 1):
                problems += 1
        entries = client.get("/v1/stats").json()["entries"]
    return {
        "clients": clients,
        "rounds": len(values),
        "requests": sum(statuses.values()),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "entries": entries,
        "rounds_with_problems": problems,
    }


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir) / "data", clients=args.clients, rounds=args.rounds,
                     seed=args.seed)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("same_hash", report)


if __name__ == "__main__":
    main()
