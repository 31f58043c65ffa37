"""Campaign: a cache writer attacks other users (issue 11, item 1).

A victim stores ``--entries`` results with ``cached_compute``; an attacker who can write to
the cache but does not know the victim's signing key replaces every one of them (DELETE +
PUT, valid digests): a third with pickles whose unpickling creates a marker file, a third
with a wrong value carrying a signature copied from another entry, and a third (issue 29,
row 1) with such a pickle built to have the genuine body's content digest (an xxh3 second
preimage), carrying the entry's own genuine signature. The victim computes again, in
its own process (threads) and on a ``LocalCluster`` worker. Counted: payloads that ran,
wrong values returned, entries reported untrusted, entries still indexed. Run once without
a key (the documented risk) and once with one.

    python -m tests.stress.poisoned --entries 50
"""

from __future__ import annotations

import pickle
import secrets
import tempfile
import uuid
from pathlib import Path
from typing import Any

import dask
import httpx

from cache_server.launch import RunningServer, start_server
from client_lib import cached_compute, last_report
from tests.reliability._xxh3_forgery import forge
from tests.server.wire import Encoded, put
from tests.stress._common import campaign_parser, entry_hashes, print_report

__all__ = ["Payload", "run"]


class Payload:
    """Unpickling this creates ``marker`` (proof that it ran) and evaluates to ``value``."""

    def __init__(self, marker: Path, value: object) -> None:
        self.code = f"__import__('os').makedirs({str(marker)!r}, exist_ok=True) or {value!r}"

    def __reduce__(self):
        return (eval, (self.code,))


def square(n: int) -> dict:
    # A few KiB: room for a forged pickle and its compensating bytes in one xxh3 block.
    return {"n": n, "square": n * n, "table": [n * i for i in range(600)]}


def _attack(server: RunningServer, markers: Path) -> int:
    """Replace every entry; returns how many were replaced."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        hashes = entry_hashes(client)
        signatures = [client.get(f"/v1/entries/{h}").json().get("signature") for h in hashes]
        for i, task_hash in enumerate(hashes):
            payload = pickle.dumps(Payload(markers / f"ran-{i}", {"n": -1}))
            if i % 3 == 0:  # code that runs when unpickled
                body, signature = payload, None
            elif i % 3 == 1:  # a wrong value with a genuine signature of another entry
                body = pickle.dumps({"n": -1, "square": -1})
                signature = signatures[i - 1]
            else:  # that code, with the genuine body's digest and signature
                genuine = client.get(f"/v1/objects/{task_hash}").content
                body, signature = forge(b"pickle\n\n\n", genuine, payload), signatures[i]
            assert client.delete(f"/v1/entries/{task_hash}").status_code == 204
            overrides = {"signature": signature} if signature else None
            assert put(client, task_hash, Encoded("pickle", body),
                       overrides=overrides).status_code == 201
    return len(hashes)


def _round(workdir: Path, entries: int, key: str | None, scheduler: Any) -> dict[str, Any]:
    markers = workdir / uuid.uuid4().hex
    markers.mkdir()
    with start_server(workdir / uuid.uuid4().hex) as server, \
            dask.config.set({"result-cache.signing-key": key}):
        values = [dask.delayed(square, pure=True)(n) for n in range(entries)]
        ns = uuid.uuid4().hex
        cached_compute(*values, cache=server.url, namespace=ns, policy="all",
                       scheduler=scheduler)
        replaced = _attack(server, markers)
        again = cached_compute(*values, cache=server.url, namespace=ns, scheduler=scheduler)
        report = last_report()
        with httpx.Client(base_url=server.url) as client:
            still_indexed = len(entry_hashes(client))
            untrusted_stat = client.get("/v1/stats").json().get("untrusted")
    return {
        "replaced": replaced,
        "payloads_run": len(list(markers.iterdir())),
        "wrong_values": sum(v != square(n) for n, v in enumerate(again)),
        "loaded": report.loaded,
        "untrusted_reported": getattr(report, "untrusted", None),
        "untrusted_in_stats": untrusted_stat,
        "still_indexed": still_indexed,
    }


def run(workdir: Path, *, entries: int) -> dict[str, Any]:
    from distributed import Client, LocalCluster

    report: dict[str, Any] = {}
    key = secrets.token_hex(32)
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        for signing in ("without_key", "with_key"):
            for where, scheduler in (("threads", "threads"), ("local_cluster", client)):
                report[f"{signing}_{where}"] = _round(
                    workdir, entries, key if signing == "with_key" else None, scheduler)
    return report


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        print_report("poisoned", run(Path(tmp), entries=args.entries))


if __name__ == "__main__":
    main()
