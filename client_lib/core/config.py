"""The ``result-cache`` section of ``dask.config``. docs/design/deployment.md, Configuration.

Never a top-level ``cache`` key: Dask's local schedulers read ``config.get("cache")`` as
their results dictionary. ``DASK_RESULT_CACHE__URL=http://...`` sets ``result-cache.url``
in every process Dask starts, workers included.

:func:`setting` is the one reader of the section: every ``result-cache.*`` value
``client_lib`` uses is read through it, with its default from :data:`DEFAULTS`.
"""

from __future__ import annotations

from typing import Any

import dask.config

__all__ = ["DEFAULTS", "setting"]

DEFAULTS = {
    "result-cache": {
        # e.g. http://127.0.0.1:8780; replicas of one cache comma-separated (failover)
        "url": None,
        "token": None,  # bearer token, when the server requires one
        "signing-key": None,  # team secret: sign and check results (dask-cache keygen)
        # Ed25519 public keys whose signatures this process loads (comma-separated); with
        # no ed25519 signing-key it only reads (dask-cache keygen --ed25519)
        "trusted-keys": None,
        "namespace": "default",
        "policy": "auto",  # auto | all | outputs | none
        # Functions whose tasks are never cached (they read the clock, a service, ...)
        # and functions whose tasks always run (they write somewhere): "module.qualname"
        # names, a list or separated by commas. docs/correctness.md.
        "volatile-functions": [],
        "side-effect-functions": [],
        "mode": "read-write",  # read-write | read-only (load, never store)
        "refresh": False,  # recompute what would be loaded, overwrite the entries
        "ttl": None,  # lifetime of new entries ("7d", seconds); None: until evicted
        "lease-ttl": 60,  # seconds a computing task's lease lives without renewal
        "lease-wait": 60,  # most seconds a task waits for another's lease (whatever it estimates)
        "parquet-min-bytes": 2**20,  # frames this large are stored as Parquet, if exact
        # auto: read objects where they lie when this process sees the server's storage
        # (same host, shared volume), verified; else over HTTP. never: always HTTP.
        "direct-read": "auto",
        # auto: write large objects into the server's storage (its staging area) when this
        # process can, for the server to verify and commit; else upload. never: upload.
        "direct-write": "auto",
        "lease-limit": 10_000,  # a run computing more tasks takes no leases; 0: never
        "report-runs": True,  # send each run's summary to the server (its dashboard)
        "recipes": True,  # record what each stored hash was made of (client_lib.why)
        # Route dask.compute, .compute(), dask.persist and a distributed Client's compute,
        # persist and get through the cache when client_lib is imported (client_lib.enable)
        "enabled": False,
        # Name client_lib.worker in distributed.worker.preload when client_lib is
        # imported: a LocalCluster made afterwards imports and warms the cache on worker
        # start, not in its first task (docs/design/transport.md, Warming the workers)
        "preload-workers": True,
        "auto": {
            # The auto policy's conservative default for loads of a kind and size this
            # process has not loaded yet (client_lib/policy/speeds.py learns the real ones).
            "latency": 0.005,  # seconds per load request
            "throughput": 150e6,  # bytes per second a load achieves
            # The bytes a run may add (client_lib/policy/budget.py): its intermediates at most
            # this many times the bytes it read (loaded, or computed by tasks with nothing
            # upstream), plus min-run-bytes (first come); the server's eviction keeps the
            # cache within its cap.
            "max-run-bytes": 1.0,
            "min-run-bytes": 64 * 2**20,
        },
        # Write-behind (client_lib/execution/store_queue.py): bytes of chosen results a
        # process holds while they upload; over it a result is dropped from storing
        # (counted, reported). None: a quarter of a distributed worker's memory limit,
        # else 1 GiB. "256 MiB" or a number of bytes.
        "store-buffer": None,
        "store-wait": 120,  # seconds a run's end waits for its stores at most
    }
}

dask.config.update_defaults(DEFAULTS)


def setting(name: str) -> Any:
    """This process's ``result-cache.<name>`` (``auto.latency`` for a nested one), or its
    default from :data:`DEFAULTS`. Validating it is the caller's: it knows the bounds."""
    default: Any = DEFAULTS["result-cache"]
    for part in name.split("."):
        default = default[part]
    return dask.config.get(f"result-cache.{name}", default)
