"""What seeing the cache costs, and what a server lost mid-run costs.

1. ``report``: a cold and a warm ``cached_compute`` of the fan-in graph (``--n`` tasks)
   with run reports (``result-cache.report-runs``, the dashboard's runs: the plan with
   its task list, progress, the final summary) against the same runs without them, the
   two alternating; also the calling thread's CPU time, steadier on a shared machine.
   Target <= 1.10x (wall time).
2. ``server_lost``: ``--chains`` independent chains of three tasks sleeping ``--sleep``
   seconds each; the first task of each chain is cached, then the server is killed
   (SIGKILL) after the lookup, before any task runs. The wall time of ``cached_compute``
   against ``dask.compute`` of the same graph: one failed load, then one run without the
   cache (before: up to three runs of the graph, every store tried and logged).
   Target <= 1.25x.
3. ``page``: rendering the dashboard (``GET /``, 20 runs, up to 5000 events for the plot)
   against ``GET /v1/stats``, with ``--runs`` runs recorded. No target.

    python bench/dashboard_costs.py [--repeat 5] [--n 2000] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time
import uuid

import dask
import httpx
from _graphs import build
from _harness import Ratio, cache_server, finish, median_seconds, parse_args
from dask.callbacks import Callback

from client_lib import cached_compute, last_report
from client_lib.plan.runs import flush_posts


def _options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n", type=int, default=2000, help="tasks of the fan-in graph")
    parser.add_argument("--chains", type=int, default=6)
    parser.add_argument("--sleep", type=float, default=0.5)
    parser.add_argument("--runs", type=int, default=1000, help="runs recorded for the page")


def _timed_run(url: str, n: int, warm: bool, reporting: bool) -> tuple[float, float]:
    """One ``cached_compute`` of a fresh fan-in (filled first when ``warm``): its wall
    seconds and the calling thread's CPU seconds."""
    namespace = uuid.uuid4().hex
    with dask.config.set({"result-cache.report-runs": reporting}):
        if warm:
            cached_compute(build("fanin", n), cache=url, namespace=namespace,
                           scheduler="threads")
        flush_posts(30)  # the filling run's summary is not part of the timed run
        graph = build("fanin", n)
        start, cpu = time.perf_counter(), time.thread_time()
        cached_compute(graph, cache=url, namespace=namespace, scheduler="threads")
        seconds, cpu = time.perf_counter() - start, time.thread_time() - cpu
    flush_posts(30)  # nor is its own summary part of the next run
    return seconds, cpu


def measure_reports(url: str, n: int, repeat: int) -> tuple[list[Ratio], dict]:
    """Runs with and without reports alternate (on, off, then off, on, ...): on a shared
    machine both see the same load, where runs in two blocks would see two."""
    out: dict[str, float] = {}
    for reporting in (True, False):  # untimed: imports, connections, first summaries
        _timed_run(url, n, True, reporting)
    for mode in ("cold", "warm"):
        times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for i in range(repeat):
            for reporting in ((True, False) if i % 2 == 0 else (False, True)):
                times[reporting].append(_timed_run(url, n, mode == "warm", reporting))
        for reporting, name in ((True, "on"), (False, "off")):
            out[f"{mode}_{name}"] = statistics.median(t for t, _ in times[reporting])
            out[f"{mode}_{name}_cpu"] = statistics.median(c for _, c in times[reporting])
    for key, value in out.items():
        print(f"{key}: {value * 1e3:.1f} ms")
    return [Ratio(f"report_{mode}", out[f"{mode}_on"] / out[f"{mode}_off"], 1.10,
                  note=f"{n} tasks, reports on/off, alternating; caller CPU "
                       f"{out[f'{mode}_on_cpu'] / out[f'{mode}_off_cpu']:.2f}x")
            for mode in ("cold", "warm")], out


def chains(count: int, seconds: float) -> tuple[list, list]:
    """The first task of each chain, and each chain's last task."""
    def step(i: int, *deps: int) -> int:
        time.sleep(seconds)
        return i + sum(deps)

    firsts, lasts = [], []
    for c in range(count):
        a = dask.delayed(step, pure=True)(c)
        b = dask.delayed(step, pure=True)(c + 100, a)
        firsts.append(a)
        lasts.append(dask.delayed(step, pure=True)(c + 200, b))
    return firsts, lasts


class _KillAtStart(Callback):
    def __init__(self, server) -> None:  # noqa: ANN001 - a RunningServer
        super().__init__()
        self.server = server

    def _start(self, dsk) -> None:  # noqa: ANN001
        if self.server.alive():
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.process.wait()


def measure_server_lost(count: int, seconds: float, repeat: int) -> tuple[Ratio, dict]:
    lost: list[float] = []
    reports = []
    for _ in range(repeat):
        with cache_server() as server:
            ns = uuid.uuid4().hex
            firsts, graph = chains(count, seconds)
            cached_compute(firsts, cache=server.url, namespace=ns, policy="all",
                           scheduler="threads")
            with _KillAtStart(server):
                start = time.perf_counter()
                cached_compute(graph, cache=server.url, namespace=ns, policy="all",
                               scheduler="threads")
                lost.append(time.perf_counter() - start)
            reports.append(last_report().fallback)
    plain, _ = median_seconds(lambda: dask.compute(chains(count, seconds)[1],
                                                   scheduler="threads"), repeat)
    lost.sort()
    median = lost[len(lost) // 2]
    print(f"server lost: {median:.2f} s, plain dask.compute {plain:.2f} s ({reports[0]})")
    return Ratio("server_lost", median / plain, 1.25,
                 note=f"{count} chains of 3 x {seconds} s"), {"lost": median, "plain": plain}


def measure_page(url: str, runs: int, repeat: int) -> tuple[Ratio, dict]:
    for i in range(runs):
        httpx.post(f"{url}/v1/runs", json={"run_id": uuid.uuid4().hex, "started": 1e9 + i,
                                           "status": "done", "tasks": 10})
    with httpx.Client(base_url=url) as client:
        page, _ = median_seconds(lambda: client.get("/", headers={"Accept": "text/html"}),
                                 repeat)
        stats, _ = median_seconds(lambda: client.get("/v1/stats"), repeat)
    print(f"GET /: {page * 1e3:.1f} ms, GET /v1/stats: {stats * 1e3:.1f} ms")
    return Ratio("page", page / stats, None, note=f"{runs} runs recorded"), {
        "page_ms": page * 1e3, "stats_ms": stats * 1e3}


def main() -> None:
    args = parse_args(__doc__.split("\n\n")[0], extra=_options)
    if args.smoke:
        args.n, args.chains, args.sleep, args.runs = 200, 2, 0.05, 20
    with cache_server() as server:
        ratios, reports = measure_reports(server.url, args.n, args.repeat)
        page_ratio, page = measure_page(server.url, args.runs, args.repeat)
    lost_ratio, lost = measure_server_lost(args.chains, args.sleep, args.repeat)
    finish("dashboard_costs", [*ratios, lost_ratio, page_ratio], args, reports=reports,
           server_lost=lost, page=page)


if __name__ == "__main__":
    main()
