"""Fault campaign 16: the index's Redis fails over (Sentinel, and Redis Cluster).

Writers store ``entries`` values through a cache server without pause; once a third of
them are acknowledged, the Redis primary that holds them is killed with SIGKILL:

- ``sentinel``: the compose file's ``sentinel`` profile as local processes, with its own
  commands (a primary, a replica, three sentinels, the cache server on
  ``redis+sentinel://``); the sentinels promote the replica;
- ``cluster``: a Redis Cluster of three masters with a replica each (``redis-cli --cluster
  create``), the server on ``redis+cluster://``; the killed master's replica takes over.

Counted: how long until every entry acknowledged before the kill is found again (a hit),
what the server answered meanwhile (503 with ``Retry-After``, nothing else), whether
stores work again, and every acknowledged entry at the end: found, and served as stored.
For the cluster, how many entries each master held before the kill. Then ``dask-cache gc``
runs beside the server on the failed-over index (under the maintenance lease): it must
find nothing to drop.

    python -m tests.stress.failover --mode sentinel --entries 300
    python -m tests.stress.failover --mode cluster --entries 300
"""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import redis

from cache_server.index.keyspace import Keyspace
from cache_server.launch import start_server
from tests._servers import RedisClusterProcesses, free_port
from tests.server.wire import put
from tests.stress._common import (
    Value,
    campaign_parser,
    make_values,
    print_report,
    run_cli,
    verify,
)

__all__ = ["entries_per_master", "run_cluster", "run_sentinel"]

#: Every entry acknowledged before the kill must be a hit again within this long.
FAILOVER_SECONDS = 30.0
_WRITERS = 4
_STORE_DEADLINE = 90.0  # seconds a writer keeps retrying one value
_PREFIX = "fo:"


class _Writers:
    """Threads that store values until each is acknowledged (201/200), retrying after a
    503's ``Retry-After``; every answer is counted."""

    def __init__(self, url: str, values: list[Value]) -> None:
        self.url = url
        self.pending = list(reversed(values))
        self.acknowledged: dict[str, float] = {}  # hash -> when
        self.answers: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._work, daemon=True)
                        for _ in range(_WRITERS)]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def join(self) -> None:
        for thread in self.threads:
            thread.join()

    def _next(self) -> Value | None:
        with self.lock:
            return self.pending.pop() if self.pending else None

    def _work(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while (value := self._next()) is not None:
                self._store(client, value)

    def _store(self, client: httpx.Client, value: Value) -> None:
        deadline = time.monotonic() + _STORE_DEADLINE
        while time.monotonic() < deadline:
            try:
                response = put(client, value.task_hash, value.encoded, label=value.label)
            except httpx.HTTPError:
                self._count("transport error")
                time.sleep(0.2)
                continue
            status = response.status_code
            if status in (200, 201):
                with self.lock:
                    self.acknowledged[value.task_hash] = time.monotonic()
                self._count(str(status))
                return
            retry_after = response.headers.get("retry-after")
            self._count(f"{status} with Retry-After" if retry_after else str(status))
            time.sleep(float(retry_after or 1))
        self._count("gave up")

    def _count(self, answer: str) -> None:
        with self.lock:
            self.answers[answer] += 1

    def acknowledged_count(self) -> int:
        with self.lock:
            return len(self.acknowledged)


def _found(client: httpx.Client, hashes: list[str]) -> set[str]:
    """The hashes a lookup (the packed route clients use) finds now; empty while the
    server answers 503."""
    try:
        response = client.post("/v1/lookup/packed", content="".join(hashes).encode(),
                               headers={"Content-Type": "application/octet-stream"})
    except httpx.HTTPError:
        return set()
    if response.status_code != 200:
        return set()
    return {h for h, flag in zip(hashes, response.content, strict=True) if flag}


def _campaign(url: str, values: list[Value], kill: Callable[[], None]) -> dict[str, Any]:
    """Store ``values``, ``kill`` the primary a third of the way, and count."""
    writers = _Writers(url, values)
    writers.start()
    while writers.acknowledged_count() < len(values) // 3:
        time.sleep(0.05)
    with writers.lock:
        before = sorted(writers.acknowledged)
    kill()
    killed_at = time.monotonic()
    failover_seconds = None
    with httpx.Client(base_url=url, timeout=30) as client:
        while time.monotonic() - killed_at < 2 * FAILOVER_SECONDS:
            if _found(client, before) == set(before):
                failover_seconds = round(time.monotonic() - killed_at, 1)
                break
            time.sleep(0.2)
        writers.join()
        after_kill = sum(1 for when in writers.acknowledged.values() if when > killed_at)
        acknowledged = sorted(writers.acknowledged)
        found = _found(client, acknowledged)
        expected = {v.task_hash: v for v in values}
        checked = verify(client, acknowledged, expected)
        entries = client.get("/v1/stats").json()["entries"]
    return {
        "entries": len(values),
        "acknowledged_before_kill": len(before),
        "hit_again_after_seconds": failover_seconds,
        "acknowledged_after_kill": after_kill,
        "acknowledged": len(acknowledged),
        "answers": dict(writers.answers),
        "found_at_end": len(found),
        "verified": checked["verified"],
        "wrong_served": checked["wrong"],
        "lost": len(set(acknowledged) - found),
        "indexed_entries": entries,
    }


def _gc(data_dir: str, redis_url: str, prefix: str) -> dict[str, int]:
    """``dask-cache gc`` beside the running server: what it repaired, and the index after."""
    report = run_cli("gc", "--data-dir", data_dir, "--redis-url", redis_url,
                     "--redis-prefix", prefix)
    keep = ("dangling_entries_removed", "orphan_objects_removed", "entries")
    return {name: report[name] for name in keep}


# -- Sentinel: the compose file's profile ----------------------------------------------------


def _sentinel_ports() -> dict[str, str]:
    names = ("HA_PRIMARY_PORT", "HA_REPLICA_PORT", "SENTINEL_PORT_1", "SENTINEL_PORT_2",
             "SENTINEL_PORT_3", "HA_CACHE_PORT")
    return {name: str(free_port()) for name in names}


def wait_for_sentinels(ports: dict[str, str], timeout: float = 60.0) -> None:
    """Until every sentinel knows the replica and the two other sentinels (they learn
    both from the primary, within seconds of starting)."""
    deadline = time.monotonic() + timeout
    for name in ("SENTINEL_PORT_1", "SENTINEL_PORT_2", "SENTINEL_PORT_3"):
        sentinel = redis.Redis(port=int(ports[name]), decode_responses=True, socket_timeout=2)
        try:
            while True:
                replicas = sentinel.execute_command("SENTINEL", "REPLICAS", "result-cache")
                others = sentinel.execute_command("SENTINEL", "SENTINELS", "result-cache")
                if len(replicas) >= 1 and len(others) >= 2:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sentinel on {ports[name]}: {replicas}, {others}")
                time.sleep(0.2)
        finally:
            sentinel.close()


@contextmanager
def sentinel_stack(workdir: Path) -> Iterator[tuple[Any, dict[str, str]]]:
    """The compose file's ``sentinel`` profile as local processes, its cache server
    healthy and its sentinels ready: (the LocalStack, the ports)."""
    from tests.deploy._compose import LocalStack, compose_config

    ports = _sentinel_ports()
    with LocalStack(compose_config(ports), workdir, profiles=("sentinel",)) as stack:
        stack.start_in_order("cache-ha")
        stack.wait_healthy("cache-ha")
        wait_for_sentinels(ports)
        yield stack, ports


def run_sentinel(workdir: Path, *, entries: int, seed: int = 0) -> dict[str, Any]:
    values = make_values(entries, seed, zarr_every=0)
    with sentinel_stack(workdir) as (stack, ports):
        primary = stack.processes["redis-primary"][0]
        report = _campaign(f"http://127.0.0.1:{ports['HA_CACHE_PORT']}", values,
                           lambda: os.killpg(primary.pid, signal.SIGKILL))
        env = stack.local_env("cache-ha")
        report["gc_after"] = _gc(env["RESULT_CACHE_DATA_DIR"], env["RESULT_CACHE_REDIS_URL"],
                                 "rc:")
        sentinel = redis.Redis(port=int(ports["SENTINEL_PORT_1"]), decode_responses=True)
        host, port = sentinel.execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "result-cache")
        sentinel.close()
        report["primary_now"] = "replica" if port == ports["HA_REPLICA_PORT"] else port
    return report


# -- Redis Cluster -----------------------------------------------------------------------------


def entries_per_master(cluster: RedisClusterProcesses, prefix: str = _PREFIX
                       ) -> dict[int, int]:
    """port -> how many entries the master on that port holds (its shards' ``members``)."""
    keys = Keyspace(prefix, sharded=True)
    counts: dict[int, int] = {}
    for port in cluster.masters():
        node = redis.Redis(port=port, decode_responses=True, socket_timeout=5)
        try:
            total = 0
            for shard in keys.shards:
                try:
                    total += node.scard(shard.members)
                except redis.ResponseError:  # MOVED: another master's shard
                    continue
            counts[port] = total
        finally:
            node.close()
    return counts


def run_cluster(workdir: Path, *, entries: int, seed: int = 0, masters: int = 3,
                replicas: int = 1) -> dict[str, Any]:
    values = make_values(entries, seed, zarr_every=0)
    cluster = RedisClusterProcesses(workdir / "cluster", masters=masters, replicas=replicas)
    try:
        with start_server(workdir / "data", redis_url=cluster.url,
                          redis_prefix=_PREFIX) as server:
            spread: dict[str, Any] = {}

            def kill() -> None:
                counts = entries_per_master(cluster)
                victim = max(counts, key=counts.__getitem__)
                spread.update(per_master=sorted(counts.values()), killed_master_held=counts[
                    victim])
                cluster.kill(victim)

            report = _campaign(server.url, values, kill)
            cluster.wait_until_ok(masters, 0)
            report.update(spread, masters_now=len(cluster.masters()))
            report["gc_after"] = _gc(str(workdir / "data"), cluster.url, _PREFIX)
    finally:
        cluster.stop()
    return report


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("sentinel", "cluster"), required=True)
    parser.add_argument("--entries", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        run = run_sentinel if args.mode == "sentinel" else run_cluster
        report = run(Path(workdir), entries=args.entries, seed=args.seed)
        report["seconds"] = round(time.monotonic() - started, 1)
        report["load_average"] = [round(x, 2) for x in os.getloadavg()]
    print_report(f"failover_{args.mode}", report)


if __name__ == "__main__":
    main()
