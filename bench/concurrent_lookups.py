"""Measure 7, concurrent lookups: 16 clients, each looking up 1k hashes again and again for
20 s against one server (half of the hashes indexed): throughput, p50/p99 latency, errors.

The clients are threads with a ``CacheClient`` (its own connection pool) each, spread over
two processes so that encoding and decoding on the client side do not queue behind one
interpreter lock; the server runs on the same two cores. Baseline, measured in the same
run: one client alone, for a quarter of the time. The throughput of the 16 back-to-back
clients is the saturation throughput; a third run paces the 16 clients at half of it (each
lookup timed from its scheduled start). The server's and Redis's CPU time per lookup at
saturation is reported too (steadier than latency on a shared machine). Targets: p99 <= 10
ms at half of saturation, 0 errors.

    python bench/concurrent_lookups.py [--clients 16] [--seconds 20] [--smoke]
"""

from __future__ import annotations

import json
import multiprocessing
import statistics
import threading
import time
import uuid

from _harness import (
    Ratio,
    cache_server,
    finish,
    own_redis,
    parse_args,
    process_cpu_seconds,
    redis_cpu_seconds,
    seed_index,
)

PREFIX = "rc:"
PROCESSES = 2


def _options(parser) -> None:
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--hashes", type=int, default=1000, help="hashes per lookup")


def client_loop(client, hashes: list[str], deadline: float, expected: int,
                latencies: list[float], errors: list[str], interval: float = 0.0) -> None:
    """Lookups back to back, or (``interval`` > 0) one every ``interval`` seconds on a
    fixed schedule, each timed from its scheduled start (a late start counts as waiting)."""
    start = time.perf_counter()
    while start < deadline:
        if interval:
            time.sleep(max(0.0, start - time.perf_counter()))
        try:
            found = client.lookup(hashes)
        except Exception as exc:  # every failure counts, whatever it is
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
            start = start + interval if interval else time.perf_counter()
            continue
        latencies.append(time.perf_counter() - start)
        if len(found) != expected:
            errors.append(f"wrong answer: {len(found)} found, expected {expected}")
        start = start + interval if interval else time.perf_counter()
    client.close()


def process_main(url: str, hashes: list[str], threads: int, go, seconds: float,
                 queue, interval: float = 0.0) -> None:
    """One client process: ``threads`` clients, connected first; says ``ready``, then runs
    for ``seconds`` once ``go`` is set."""
    from client_lib import CacheClient

    clients = [CacheClient(url) for _ in range(threads)]
    for client in clients:
        client.stats()
    latencies: list[float] = []
    errors: list[str] = []
    queue.put("ready")
    go.wait()
    deadline = time.perf_counter() + seconds
    workers = [threading.Thread(target=client_loop, args=(
        client, hashes, deadline, len(hashes) // 2, latencies, errors, interval))
        for client in clients]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    queue.put(json.dumps({"latencies": latencies, "errors": errors}))


def run_clients(url: str, hashes: list[str], clients: int, seconds: float,
                rate: float = 0.0) -> tuple[list[float], list[str]]:
    """``clients`` clients for ``seconds``: back to back, or together ``rate`` lookups/s."""
    interval = clients / rate if rate else 0.0
    processes = min(PROCESSES, clients)
    per_process = [clients // processes + (i < clients % processes) for i in range(processes)]
    ctx = multiprocessing.get_context("spawn")
    queue, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=process_main, args=(url, hashes, k, go, seconds, queue,
                                                    interval)) for k in per_process]
    for p in procs:
        p.start()
    for _ in procs:  # every process imported and connected: start together
        if queue.get(timeout=120) != "ready":
            raise RuntimeError("a client process failed to start")
    go.set()
    results = [json.loads(queue.get(timeout=seconds + 120)) for _ in procs]
    for p in procs:
        p.join()
    latencies = [t for r in results for t in r["latencies"]]
    errors = [e for r in results for e in r["errors"]]
    return latencies, errors


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(latencies: list[float], seconds: float) -> dict[str, float]:
    return {"lookups": len(latencies), "per_second": len(latencies) / seconds,
            "p50_ms": statistics.median(latencies) * 1e3,
            "p99_ms": percentile(latencies, 0.99) * 1e3, "max_ms": max(latencies) * 1e3}


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], repeat=1, extra=_options)
    seconds = 0.5 if args.smoke else args.seconds
    clients = 4 if args.smoke else args.clients
    hashes = [uuid.uuid4().hex for _ in range(args.hashes)]
    with own_redis() as r, cache_server(redis_url=r.url, redis_prefix=PREFIX) as server:
        seed_index(r, hashes, PREFIX)
        alone, alone_errors = run_clients(server.url, hashes, 1, seconds / 4)
        cpu = process_cpu_seconds(server.pid), redis_cpu_seconds(r)
        loaded, errors = run_clients(server.url, hashes, clients, seconds)
        server_cpu = (process_cpu_seconds(server.pid) - cpu[0]) / max(len(loaded), 1)
        redis_cpu = (redis_cpu_seconds(r) - cpu[1]) / max(len(loaded), 1)
        saturation = len(loaded) / seconds
        half, half_errors = run_clients(server.url, hashes, clients, seconds, saturation / 2)
    errors += half_errors
    base, load = summary(alone, seconds / 4), summary(loaded, seconds)
    at_half = summary(half, seconds)
    for name, s in (("1 client", base), (f"{clients} clients", load),
                    (f"{clients} at half", at_half)):
        print(f"{name:11s} {s['per_second']:7.0f} lookups/s ({s['per_second'] * args.hashes:9.0f}"
              f" hashes/s)  p50 {s['p50_ms']:6.2f} ms  p99 {s['p99_ms']:6.2f} ms  "
              f"max {s['max_ms']:6.1f} ms")
    print(f"CPU per lookup at saturation: server {server_cpu * 1e3:.3f} ms, "
          f"Redis {redis_cpu * 1e3:.3f} ms")
    all_errors = alone_errors + errors
    print(f"errors: {len(all_errors)}" + (f" (first: {all_errors[0]})" if all_errors else ""))
    ratios = [
        Ratio(f"p99_vs_alone_p50[{clients} clients]", load["p99_ms"] / base["p50_ms"],
              None),
        Ratio(f"p99_ms[{clients} clients, saturated] / 10 ms", load["p99_ms"] / 10, None),
        Ratio(f"p99_ms[{clients} clients, half of saturation] / 10 ms",
              at_half["p99_ms"] / 10, 1.0),
        Ratio("errors", len(all_errors), 0),
    ]
    finish("concurrent_lookups", ratios, args, seconds=seconds, clients=clients,
           hashes_per_lookup=args.hashes, alone=base, loaded=load, half_load=at_half,
           server_cpu_ms=server_cpu * 1e3, redis_cpu_ms=redis_cpu * 1e3,
           errors=all_errors[:10])


if __name__ == "__main__":
    main()
