"""Campaign: what bodies make the server hold in memory (issue 11, item 4).

1. ``readers`` concurrent GETs of one ``mib`` MiB array, read to the end.
2. Two GETs of it whose client never reads, held open for ``hold`` seconds.
3. Three chunked PUTs declaring ``|S2000000000``, shape ``[1]``, that send 1 MiB each.

Each reports the server's peak RSS growth (``VmHWM`` from ``/proc``, reset before it).

    python -m tests.stress.memory --mib 2048 --readers 4
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import xxhash

from cache_server.launch import RunningServer, start_server
from tests.server.wire import new_hash
from tests.stress._common import campaign_parser, print_report
from tests.stress.strangers import peak_rss, reset_peak_rss

__all__ = ["concurrent_gets", "giant_dtype_puts", "run", "stalled_gets", "store_random_array"]

MiB = 2**20


def store_random_array(url: str, mib: int, seed: int = 0) -> tuple[str, str]:
    """Store ``mib`` MiB of random float64 without holding it whole (streamed from a
    generator); (task hash, digest)."""
    n = mib * MiB // 8
    shape = f"[{n}]"
    prefix = f"ndarray\n<f8\n{shape}\n".encode()
    rng = np.random.default_rng(seed)
    hasher = xxhash.xxh3_128(prefix)
    pieces = [rng.random(MiB // 8).tobytes() for _ in range(16)]  # 16 MiB repeated
    for i in range(mib):
        hasher.update(pieces[i % 16])
    digest = hasher.hexdigest()
    task_hash = new_hash()
    headers = {"X-Result-Kind": "ndarray", "X-Result-Digest": digest, "X-Result-Dtype": "<f8",
               "X-Result-Shape": shape, "X-Result-Compute-Seconds": "60",
               "X-Result-Label": "big", "Content-Length": str(mib * MiB)}
    body = (pieces[i % 16] for i in range(mib))
    response = httpx.put(f"{url}/v1/objects/{task_hash}", content=body, headers=headers,
                         timeout=600)
    response.raise_for_status()
    return task_hash, digest


def _read_all(url: str, task_hash: str) -> int:
    n = 0
    with httpx.stream("GET", f"{url}/v1/objects/{task_hash}", timeout=600) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            n += len(chunk)
    return n


def concurrent_gets(server: RunningServer, task_hash: str, readers: int) -> dict[str, Any]:
    before = reset_peak_rss(server.pid)
    started = time.perf_counter()
    with ThreadPoolExecutor(readers) as pool:
        sizes = list(pool.map(lambda _: _read_all(server.url, task_hash), range(readers)))
    return {"readers": readers, "bytes_each": sizes[0], "complete": len(set(sizes)) == 1,
            "seconds": round(time.perf_counter() - started, 2),
            "peak_rss_growth_mib": round((peak_rss(server.pid) - before) / MiB, 1)}


def stalled_gets(server: RunningServer, task_hash: str, n: int, hold: float) -> dict[str, Any]:
    """``n`` GETs whose client reads only the first bytes, then nothing for ``hold`` s."""
    parts = urlsplit(server.url)
    before = reset_peak_rss(server.pid)
    sockets = []
    for _ in range(n):
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(f"GET /v1/objects/{task_hash} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        sock.recv(64)
        sockets.append(sock)
    time.sleep(hold)
    growth = peak_rss(server.pid) - before
    with httpx.Client(base_url=server.url, timeout=30) as client:
        healthz = client.get("/healthz").status_code
    for sock in sockets:
        sock.close()
    return {"stalled_readers": n, "held_seconds": hold, "healthz": healthz,
            "peak_rss_growth_mib": round(growth / MiB, 1)}


def giant_dtype_puts(server: RunningServer, n: int = 3) -> dict[str, Any]:
    """``n`` concurrent chunked PUTs declaring one element of 2 GB, sending 1 MiB each."""
    before = reset_peak_rss(server.pid)
    headers = {"X-Result-Kind": "ndarray", "X-Result-Digest": new_hash(),
               "X-Result-Dtype": "|S2000000000", "X-Result-Shape": "[1]",
               "X-Result-Compute-Seconds": "1", "X-Result-Label": "giant"}
    statuses: list[int] = []
    lock = threading.Lock()

    def one(_: int) -> None:
        body = (b"\0" * 2**16 for _ in range(16))  # 1 MiB, chunked
        response = httpx.put(f"{server.url}/v1/objects/{new_hash()}", content=body,
                             headers=headers, timeout=120)
        with lock:
            statuses.append(response.status_code)

    with ThreadPoolExecutor(n) as pool:
        list(pool.map(one, range(n)))
    return {"puts": n, "statuses": sorted(statuses),
            "peak_rss_growth_mib": round((peak_rss(server.pid) - before) / MiB, 1)}


def run(data_dir: Path, *, mib: int, readers: int, hold: float) -> dict[str, Any]:
    with start_server(data_dir) as server:
        task_hash, _ = store_random_array(server.url, mib)
        return {"array_mib": mib,
                "concurrent_gets": concurrent_gets(server, task_hash, readers),
                "stalled_gets": stalled_gets(server, task_hash, 2, hold),
                "giant_dtype": giant_dtype_puts(server)}


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=2048)
    parser.add_argument("--readers", type=int, default=4)
    parser.add_argument("--hold", type=float, default=5.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir) / "data", mib=args.mib, readers=args.readers,
                     hold=args.hold)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("memory", report)


if __name__ == "__main__":
    main()
