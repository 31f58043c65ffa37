"""What the campaigns share: values of every storage path, storing them, verifying them."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import xxhash

from tests.server.wire import Encoded, batch_body, encode_array, encode_pickle, new_hash, put

__all__ = [
    "ROOT",
    "Value",
    "campaign_parser",
    "entry_hashes",
    "make_values",
    "print_report",
    "run_cli",
    "store",
    "verify",
]

ROOT = Path(__file__).resolve().parents[2]
#: Arrays of at least this size go to Zarr (storage.ZARR_MIN_BYTES).
ZARR_BYTES = 2**20


@dataclass(frozen=True)
class Value:
    """A value to store under ``task_hash`` and the encoding the server must give back."""

    task_hash: str
    encoded: Encoded
    label: str


def make_values(n: int, seed: int, *, zarr_every: int = 4, big_bytes: int = ZARR_BYTES + 8
                ) -> list[Value]:
    """``n`` distinct values cycling through the storage paths: a Zarr array (every
    ``zarr_every``-th, of ``big_bytes`` random bytes, so incompressible: its size on disk is
    its size), a small array (blob) and a pickle (blob)."""
    rng = np.random.default_rng(seed)
    values = []
    for i in range(n):
        if zarr_every and i % zarr_every == 0:
            encoded = encode_array(np.frombuffer(rng.bytes(big_bytes), dtype="u1"))
            label = "zarr"
        elif i % 2:
            encoded = encode_array(rng.standard_normal(int(rng.integers(1, 500))))
            label = "array"
        else:
            encoded = encode_pickle({"i": i, "payload": rng.bytes(int(rng.integers(1, 5000)))})
            label = "pickle"
        values.append(Value(new_hash(), encoded, label))
    return values


def store(client: httpx.Client, value: Value, compute_seconds: float = 1.0) -> int:
    """PUT one value; the status (0 if the connection failed: a killed server)."""
    try:
        response = put(client, value.task_hash, value.encoded, label=value.label,
                       compute_seconds=compute_seconds, stream=value.encoded.kind == "pickle")
    except httpx.HTTPError:
        return 0
    return response.status_code


def store_batch(client: httpx.Client, values: list[Value], compute_seconds: float = 1.0
                ) -> list[int]:
    """POST small values as one batch; their statuses (all 0 if the connection failed)."""
    body = batch_body([(v.task_hash, v.encoded) for v in values],
                      compute_seconds=compute_seconds)
    try:
        response = client.post("/v1/objects/batch", content=body,
                               headers={"Content-Type": "application/x-result-batch"})
    except httpx.HTTPError:
        return [0] * len(values)
    if response.status_code != 200:
        return [response.status_code] * len(values)
    return [r["status"] for r in response.json()["results"]]


def entry_hashes(client: httpx.Client) -> list[str]:
    """Every indexed hash, through the listing (pages of 1000)."""
    hashes: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 1000} | ({"cursor": cursor} if cursor else {})
        page = client.get("/v1/entries", params=params).json()
        hashes += [entry["hash"] for entry in page["entries"]]
        cursor = page["next_cursor"]
        if not cursor:
            return hashes


def verify(client: httpx.Client, hashes: Iterable[str], expected: dict[str, Value]
           ) -> dict[str, int]:
    """GET each hash: ``verified`` when the body hashes to its digest header and equals the
    value we stored; ``wrong`` when a body is served that is not; ``missing`` on 404."""
    counts = {"verified": 0, "wrong": 0, "missing": 0}
    for task_hash in hashes:
        response = client.get(f"/v1/objects/{task_hash}")
        if response.status_code == 404:
            counts["missing"] += 1
            continue
        h = response.headers
        prefix = f"{h['x-result-kind']}\n{h.get('x-result-dtype', '')}\n"
        prefix += f"{h.get('x-result-shape', '')}\n"
        digest = xxhash.xxh3_128_hexdigest(prefix.encode() + response.content)
        value = expected.get(task_hash)
        good = digest == h["x-result-digest"] and (
            value is None or response.content == value.encoded.body)
        counts["verified" if good else "wrong"] += 1
    return counts


def run_cli(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``dask-cache ARGS --json`` and return its JSON report."""
    result = subprocess.run([sys.executable, "-m", "cache_server", *args, "--json"],
                            capture_output=True, text=True, timeout=600, cwd=ROOT,
                            env={**os.environ, **(env or {})})
    if result.returncode != 0:
        raise RuntimeError(f"dask-cache {' '.join(args)} failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def campaign_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where data dirs go (default: a temporary directory)")
    return parser


def print_report(name: str, report: dict[str, Any]) -> None:
    print(json.dumps({"campaign": name, **report}))
