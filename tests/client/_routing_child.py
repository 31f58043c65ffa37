"""A fresh process that uses Dask's own entry points while ``client_lib`` is enabled, for
``tests/client/test_routing.py``. Prints one JSON line: per entry point, its result and
what the cache did (``last_report()`` right after the call).

    python -m tests.client._routing_child GROUP CACHE_URL NAMESPACE

``threads``: ``obj.compute()``, ``dask.compute``, ``dask.persist``, ``obj.persist()`` on the
collections' default scheduler. ``local-cluster``: ``Client.compute`` (futures and
``sync=True``), ``Client.persist``, ``.compute()`` and ``dask.persist`` under the default
client of a ``LocalCluster`` started after ``client_lib.enable`` (so the ``Client`` class
is wrapped by the client preload), plus whether the workers enabled the cache themselves.
Each entry point has a namespace of its own (``NAMESPACE-<entry>``): what one stores is
loaded only by the same entry point in the next process.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

import dask
import dask.array as da
import numpy as np

import client_lib
from client_lib import last_report


def inc(x):
    return x + 1


def double(x):
    return 2 * x


def _report() -> dict:
    report = last_report()
    assert report is not None, "the call was not routed: no report"
    return {k: getattr(report, k) for k in ("namespace", "tasks", "hits", "loaded",
                                            "computed", "fallback")}


def _value(x) -> object:
    return x.tolist() if isinstance(x, np.ndarray) else x.item() if hasattr(x, "item") else x


def _array():
    return da.from_array(np.arange(24.0).reshape(6, 4), chunks=(3, 2)) * 3 + 1


def _delayed():
    return dask.delayed(double)(dask.delayed(inc)(20))


def threads() -> dict[str, Callable[[], tuple]]:
    """Each entry point returns its result and the report of its own call."""
    def obj_compute():
        return _value(_array().sum().compute()), _report()

    def dask_compute():
        total, parts = dask.compute(_array().mean(), {"d": _delayed(), "n": 3})
        return [_value(total), parts], _report()

    def dask_persist():
        (held,) = dask.persist(_array())
        report = _report()
        return _value(held.sum().compute(scheduler="sync")), report

    def obj_persist():
        held = _delayed().persist()
        report = _report()
        return held.compute(scheduler="sync"), report

    return {"obj.compute": obj_compute, "dask.compute": dask_compute,
            "dask.persist": dask_persist, "obj.persist": obj_persist}


def local_cluster(client) -> dict[str, Callable[[], tuple]]:
    from distributed import wait

    def client_compute():
        future = client.compute(_array().sum())
        report = _report()
        return [type(future).__name__, _value(future.result())], report

    def client_compute_sync():
        values = client.compute([_array().max(), _delayed()], sync=True)
        return [_value(values[0]), values[1]], _report()

    def client_persist():
        held = client.persist(_array())
        report = _report()
        wait(held)
        return _value(held.sum().compute()), report

    def default_client_compute():
        return _value(_array().mean().compute()), _report()

    def default_client_persist():
        (held,) = dask.persist(_delayed())
        report = _report()
        return held.compute(), report

    return {"Client.compute": client_compute, "Client.compute sync": client_compute_sync,
            "Client.persist": client_persist,
            ".compute() default client": default_client_compute,
            "dask.persist default client": default_client_persist}


def _scheduler_config() -> str:
    return type(dask.config.get("scheduler", None)).__name__


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("group", choices=["threads", "local-cluster"])
    parser.add_argument("cache")
    parser.add_argument("namespace")
    args = parser.parse_args()
    out: dict[str, object] = {}

    def run(entries: dict[str, Callable[[], tuple]]) -> None:
        for name, call in entries.items():
            client_lib.enable(cache=args.cache, namespace=f"{args.namespace}-{name}",
                              policy="all")
            result, report = call()
            out[name] = {"result": result, "report": report}

    if args.group == "threads":
        run(threads())
    else:
        client_lib.enable(cache=args.cache, policy="all")
        from distributed import Client, LocalCluster

        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0") as cluster:
            with Client(cluster) as client:
                run(local_cluster(client))
                out["workers"] = sorted(client.run(_scheduler_config).values())
    client_lib.disable()
    print(json.dumps(out))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
