"""Measure 4, batch lookup: 1k, 10k and 100k hashes through ``POST /v1/lookup`` over HTTP
(``CacheClient.lookup``: JSON encoding, the request, the server, decoding) against a raw
pipelined Redis ``EXISTS`` of the same keys, on the same Redis.

The benchmark starts its own redis-server (the embedded one's binary and settings, on a
unix socket) and a cache server over it, and seeds half of the hashes straight into the
index's membership set and manifest keys (``rc:members``, ``rc:m:<hash>``). ``SMISMEMBER``
(what the server runs) is reported too, and the CPU time per lookup of the server and of
the client (steadier than wall time on a shared machine). Target: 100k hashes in
<= 100 ms, shown as ``lookup_ms[100000] / 100 ms``. Leasing the same hashes
(``POST /v1/leases/packed``, each time after releasing them) is reported against the
lookup, in wall time (target for 100k: <= 2x) and in server + Redis CPU time (Redis's own
``used_cpu_*``).

    python bench/batch_lookup.py [--repeat 7] [--sizes 1000,10000,100000] [--smoke]
"""

from __future__ import annotations

import statistics
import time
import uuid

from _harness import (
    Ratio,
    cache_server,
    finish,
    median_seconds,
    own_redis,
    parse_args,
    process_cpu_seconds,
    redis_cpu_seconds,
    seed_index,
)

from client_lib import CacheClient

PREFIX = "rc:"


def _sizes(parser) -> None:
    parser.add_argument("--sizes", default="1000,10000,100000")


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=7, extra=_sizes)
    sizes = [1000] if args.smoke else [int(s) for s in args.sizes.split(",")]
    ratios, details = [], {}
    with own_redis() as r, cache_server(redis_url=r.url, redis_prefix=PREFIX) as server:
        client = CacheClient(server.url)
        client.stats()  # connect once
        for n in sizes:
            hashes = [uuid.uuid4().hex for _ in range(n)]
            seed_index(r, hashes, PREFIX)
            keys = [f"{PREFIX}m:{h}" for h in hashes]

            def exists(keys=keys) -> None:
                with r.pipeline(transaction=False) as pipe:
                    for key in keys:
                        pipe.exists(key)
                    pipe.execute()

            found = client.lookup(hashes)
            assert found == set(hashes[::2]), "lookup answered the wrong subset"
            server_cpu, redis_cpu = process_cpu_seconds(server.pid), redis_cpu_seconds(r)
            client_cpu = time.process_time()
            http, http_runs = median_seconds(lambda hashes=hashes: client.lookup(hashes),
                                             args.repeat)
            client_cpu = (time.process_time() - client_cpu) / args.repeat
            server_cpu = (process_cpu_seconds(server.pid) - server_cpu) / args.repeat
            redis_cpu = (redis_cpu_seconds(r) - redis_cpu) / args.repeat
            raw, _ = median_seconds(exists, args.repeat)
            smis, _ = median_seconds(
                lambda hashes=hashes: r.smismember(f"{PREFIX}members", hashes), args.repeat)
            holder = f"bench-{uuid.uuid4().hex[:8]}"
            lease_runs, lease_server_cpu, lease_redis_cpu = [], 0.0, 0.0
            for _ in range(args.repeat):  # each a fresh lease: the last one released first
                client.release_leases(hashes, holder)
                cpu = process_cpu_seconds(server.pid), redis_cpu_seconds(r)
                start = time.perf_counter()
                client.acquire_leases(hashes, holder, 60)
                lease_runs.append(time.perf_counter() - start)
                lease_server_cpu += (process_cpu_seconds(server.pid) - cpu[0]) / args.repeat
                lease_redis_cpu += (redis_cpu_seconds(r) - cpu[1]) / args.repeat
            lease = statistics.median(lease_runs)
            client.release_leases(hashes, holder)
            print(f"{n:7d} hashes  HTTP lookup {http * 1e3:8.2f} ms  "
                  f"pipelined EXISTS {raw * 1e3:8.2f} ms  SMISMEMBER {smis * 1e3:8.2f} ms  "
                  f"lease {lease * 1e3:8.2f} ms\n"
                  f"                CPU per lookup: server {server_cpu * 1e3:.1f} ms, "
                  f"Redis {redis_cpu * 1e3:.1f} ms, client {client_cpu * 1e3:.1f} ms  "
                  f"(HTTP runs: {', '.join(f'{t * 1e3:.1f}' for t in http_runs)})\n"
                  f"                CPU per lease: server {lease_server_cpu * 1e3:.1f} ms, "
                  f"Redis {lease_redis_cpu * 1e3:.1f} ms")
            details[str(n)] = {"http_ms": http * 1e3, "exists_ms": raw * 1e3,
                               "smismember_ms": smis * 1e3, "lease_ms": lease * 1e3,
                               "server_cpu_ms": server_cpu * 1e3,
                               "client_cpu_ms": client_cpu * 1e3,
                               "redis_cpu_ms": redis_cpu * 1e3,
                               "lease_server_cpu_ms": lease_server_cpu * 1e3,
                               "lease_redis_cpu_ms": lease_redis_cpu * 1e3,
                               "http_runs_ms": [t * 1e3 for t in http_runs]}
            ratios.append(Ratio(f"lookup_vs_exists[{n}]", http / raw, None))
            # Issue 26: a 100k-hash lease (the packed route) within 2x of the lookup.
            ratios.append(Ratio(f"lease_vs_lookup[{n}]", lease / http,
                                2.0 if n == 100_000 else None,
                                note="a fresh lease of every hash, half of them stored"))
            lookup_cpu = max(server_cpu + redis_cpu, 1e-6)  # /proc counts 10 ms ticks
            ratios.append(Ratio(f"lease_cpu_vs_lookup[{n}]",
                                (lease_server_cpu + lease_redis_cpu) / lookup_cpu, None,
                                note="server + Redis CPU: steadier on a shared machine"))
            if n == max(sizes):
                note = "" if n == 100_000 else "the target is for 100k hashes"
                ratios.append(Ratio(f"lookup_ms[{n}] / 100 ms", http / 0.1, 1.0, note=note))
    finish("batch_lookup", ratios, args, **details)


if __name__ == "__main__":
    main()
