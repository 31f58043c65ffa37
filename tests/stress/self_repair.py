"""Campaign: recovery without a person (issue 11, item 7).

1. The embedded redis-server is killed (SIGKILL) ``--kills`` times under a server holding
   ``--entries`` entries: how long until ``/healthz`` is 200 again (``null``: not within
   ``--wait`` seconds), whether the guard became a zombie, and how many entries were lost.
2. The server is killed during a large upload, then restarted: the temporary bytes the
   kill left, and what is left once the restarted server is healthy.
3. An upload claims ``X-Result-Compute-Seconds: 1e308``: its status, and ``saved_seconds``
   after two hits.

    python -m tests.stress.self_repair --entries 1000 --kills 5
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil

from cache_server.launch import start_server
from tests.server.wire import encode_array, encode_pickle, new_hash, pieces, put
from tests.stress._common import campaign_parser, make_values, print_report, store

__all__ = ["embedded_redis", "run", "temporary_bytes"]


def embedded_redis(data_dir: Path) -> tuple[psutil.Process, psutil.Process | None]:
    """(guard, its redis-server or None) of the embedded Redis of ``data_dir``."""
    lock = str(data_dir.resolve() / "redis" / "lock")
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "cache_server" in " ".join(cmdline) and "guard" in " ".join(cmdline) \
                and lock in cmdline:
            children = process.children()
            return process, children[0] if children else None
    raise RuntimeError(f"no embedded Redis for {data_dir}")


def temporary_bytes(data_dir: Path) -> int:
    """Bytes under the storage's temporary directories (interrupted writes)."""
    return sum(p.stat().st_size for tmp in (data_dir / "objects").glob("*/.tmp")
               for p in tmp.rglob("*") if p.is_file())


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def redis_kills(workdir: Path, entries: int, kills: int, wait: float) -> dict[str, Any]:
    data_dir = workdir / "redis-kill"
    values = make_values(entries, seed=0, zarr_every=0)
    recovered: list[float | None] = []
    zombies = 0
    with start_server(data_dir) as server, httpx.Client(base_url=server.url,
                                                        timeout=30) as client:
        stored = [v for v in values if store(client, v) == 201]
        for _ in range(kills):
            guard, redis = embedded_redis(data_dir)
            assert redis is not None
            os.kill(redis.pid, signal.SIGKILL)
            killed = time.monotonic()
            while not _healthy(server.url) and time.monotonic() - killed < wait:
                time.sleep(0.05)
            recovered.append(round(time.monotonic() - killed, 2)
                             if _healthy(server.url) else None)
            zombies += guard.status() == psutil.STATUS_ZOMBIE
            if recovered[-1] is None:
                break
        if recovered[-1] is not None:
            found = client.post("/v1/lookup", json={"hashes": [v.task_hash for v in stored]})
            lost = len(stored) - len(found.json()["found"])
        else:
            lost = None  # unreachable: nothing to count
    return {"entries": len(stored), "kills": len(recovered), "healthy_after_s": recovered,
            "guard_zombie": zombies, "lost": lost}


def killed_upload(workdir: Path, redis_url: str | None, mib: int) -> dict[str, Any]:
    data_dir = workdir / "killed-upload"
    server = start_server(data_dir, redis_url=redis_url)
    encoded = encode_array(np.frombuffer(os.urandom(mib * 2**20), "u1"))  # incompressible
    sent_half = threading.Event()

    def body() -> Iterator[bytes]:
        for n, piece in enumerate(pieces(encoded.body)):
            if n == mib // 2:
                sent_half.set()
                time.sleep(120)
            yield piece

    def upload() -> None:
        try:
            httpx.put(f"{server.url}/v1/objects/{new_hash()}", content=body(),
                      headers=encoded.headers(), timeout=180)
        except httpx.HTTPError:
            pass

    threading.Thread(target=upload, daemon=True).start()
    sent_half.wait(120)
    deadline = time.monotonic() + 60
    while temporary_bytes(data_dir) < (mib // 4) * 2**20 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(server.pid, signal.SIGKILL)
    server.process.wait()
    left = temporary_bytes(data_dir)
    with start_server(data_dir, redis_url=redis_url) as again:
        after = temporary_bytes(data_dir)
        logged = "temporary" in again.log_tail(50)
    return {"upload_mib": mib, "temporary_bytes_after_kill": left,
            "temporary_bytes_after_restart": after, "restart_logged_removal": logged}


def huge_compute_seconds(workdir: Path) -> dict[str, Any]:
    with start_server(workdir / "seconds") as server, httpx.Client(base_url=server.url) as c:
        task_hash = new_hash()
        status = put(c, task_hash, encode_pickle(1), compute_seconds=1e308).status_code
        if status == 201:
            c.get(f"/v1/objects/{task_hash}")
            c.get(f"/v1/objects/{task_hash}")
        saved = c.get("/v1/stats").json()["saved_seconds"]
    return {"status": status, "saved_seconds_after_two_hits": saved}


def run(workdir: Path, *, entries: int, kills: int, wait: float, upload_mib: int,
        redis_url: str | None = None) -> dict[str, Any]:
    return {"redis_kill": redis_kills(workdir, entries, kills, wait),
            "killed_upload": killed_upload(workdir, redis_url, upload_mib),
            "compute_seconds_1e308": huge_compute_seconds(workdir)}


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--wait", type=float, default=30.0)
    parser.add_argument("--upload-mib", type=int, default=512)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        print_report("self_repair", run(Path(tmp), entries=args.entries, kills=args.kills,
                                        wait=args.wait, upload_mib=args.upload_mib))


if __name__ == "__main__":
    main()
