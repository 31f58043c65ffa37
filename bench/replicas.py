"""Replicas: the same lookups through one server and through two over one Redis, in one run.

1. One lookup of 100k hashes (half indexed): through one server, then with
   ``result-cache.url`` listing two replicas (each lookup goes to the next in turn).
   Target: two replicas <= 100 ms, as for one.
2. 16 concurrent clients doing 1k-hash lookups (bench/concurrent_lookups.py's clients) for
   ``--seconds``: ``dask-cache serve --workers 2`` against ``--workers 1``, throughput ratio
   and the server CPU per request that limits it (clients and servers share the 2 cores).
   Target: >= 1.6x.

    python bench/replicas.py [--repeat 5] [--seconds 10] [--smoke]
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path

import psutil
from _harness import Ratio, finish, median_seconds, own_redis, parse_args, seed_index
from concurrent_lookups import run_clients, summary

from cache_server.launch import start_server
from client_lib import CacheClient

PREFIX = "rc:"


def _options(parser) -> None:
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--clients", type=int, default=16)


def server_cpu(pid: int) -> float:
    """CPU seconds of a server and its replica children so far."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
    return total


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=5, extra=_options)
    n = 1000 if args.smoke else 100_000
    seconds = 0.5 if args.smoke else args.seconds
    clients = 4 if args.smoke else args.clients
    hashes = [uuid.uuid4().hex for _ in range(n)]
    details: dict = {}
    with own_redis() as r, tempfile.TemporaryDirectory(prefix="rc-bench-") as tmp:
        seed_index(r, hashes, PREFIX)  # every other one
        env = {"RESULT_CACHE_REDIS_PREFIX": PREFIX}
        servers = [start_server(Path(tmp) / f"r{i}", redis_url=r.url, env=env)
                   for i in range(2)]
        try:
            one = CacheClient(servers[0].url)
            two = CacheClient(",".join(s.url for s in servers))
            for client in (one, two):
                assert len(client.lookup(hashes)) == n // 2  # warm, and correct
            t_one, _ = median_seconds(lambda: one.lookup(hashes), args.repeat)
            t_two, _ = median_seconds(lambda: two.lookup(hashes), args.repeat)
        finally:
            for server in servers:
                server.stop()
        print(f"lookup of {n} hashes: one server {t_one * 1e3:.1f} ms, "
              f"two replicas {t_two * 1e3:.1f} ms")
        details["lookup_ms"] = {"one": t_one * 1e3, "two_replicas": t_two * 1e3}

        lookup_hashes = hashes[:1000]
        rates = {}
        for workers in (1, 2):
            with start_server(Path(tmp) / f"w{workers}", redis_url=r.url, env=env,
                              workers=workers) as server:
                time.sleep(0.5)  # every replica listening
                cpu = server_cpu(server.pid)
                latencies, errors = run_clients(server.url, lookup_hashes, clients, seconds)
                cpu = server_cpu(server.pid) - cpu
            s = summary(latencies, seconds)
            s["server_cpu_ms_per_request"] = cpu / max(1, len(latencies)) * 1e3
            s["errors"] = len(errors)
            rates[workers] = s
            print(f"--workers {workers}: {s['per_second']:7.0f} lookups/s  p50 "
                  f"{s['p50_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms  server CPU "
                  f"{s['server_cpu_ms_per_request']:.3f} ms/request  errors {len(errors)}")
        details["concurrent"] = rates
    ratios = [
        Ratio("lookup_100k_two_replicas_ms / 100 ms", t_two * 1e3 / 100, 1.0),
        Ratio("lookup_two_replicas_vs_one", t_two / t_one, None),
        Ratio("throughput_workers2_vs_workers1",
              rates[2]["per_second"] / rates[1]["per_second"], 1.6, higher_is_better=True),
        Ratio("errors", rates[1]["errors"] + rates[2]["errors"], 0),
    ]
    finish("replicas", ratios, args, hashes=n, clients=clients, seconds=seconds, **details)


if __name__ == "__main__":
    main()
