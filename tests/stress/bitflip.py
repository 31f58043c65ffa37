"""Fault campaign 3: flip random bytes in stored objects (blobs and Zarr chunks).

Stores ``objects`` values, flips one random byte in the payload of each object on disk
(a Zarr array's chunk file, a blob's file), then reads every entry: each read must be
refused (404, counted as ``corrupt``), never served, and the entry dropped.

    python -m tests.stress.bitflip --objects 100
"""

from __future__ import annotations

import random
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from cache_server.launch import start_server
from tests.stress._common import campaign_parser, make_values, print_report, store, verify

__all__ = ["flip_byte", "payload_file", "run"]


def payload_file(data_dir: Path, storage: str, digest: str) -> Path:
    """The largest file of an object other than its sidecar (a Zarr chunk, a blob)."""
    directory = data_dir / "objects" / storage / digest[:2] / digest
    files = [p for p in directory.rglob("*") if p.is_file() and p.name != "sidecar.json"]
    return max(files, key=lambda p: p.stat().st_size)


def flip_byte(path: Path, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))


def run(data_dir: Path, *, objects: int, seed: int = 0, url: str | None = None
        ) -> dict[str, Any]:
    """Against ``url`` (a server on ``data_dir``) or a server started here."""
    rng = random.Random(seed)
    values = make_values(objects, seed, zarr_every=3)
    server = None if url else start_server(data_dir)
    try:
        with httpx.Client(base_url=url or server.url, timeout=60) as client:  # type: ignore[union-attr]
            corrupt_before = client.get("/v1/stats").json()["corrupt"]
            for value in values:
                assert store(client, value) == 201
            storages = {"zarr": 0, "blob": 0}
            for value in values:
                manifest = client.get(f"/v1/entries/{value.task_hash}").json()
                storages[manifest["storage"]] += 1
                flip_byte(payload_file(data_dir, manifest["storage"], manifest["digest"]), rng)
            result = verify(client, [v.task_hash for v in values], {})
            still_indexed = sum(client.get(f"/v1/entries/{v.task_hash}").status_code == 200
                                for v in values)
            corrupt = client.get("/v1/stats").json()["corrupt"] - corrupt_before
    finally:
        if server is not None:
            server.stop()
    return {
        "objects": objects,
        "zarr_objects": storages["zarr"],
        "blob_objects": storages["blob"],
        "bytes_flipped": objects,
        "detected": result["missing"],
        "served_anyway": result["verified"] + result["wrong"],
        "counted_corrupt": corrupt,
        "still_indexed": still_indexed,
    }


def main() -> None:
    parser = campaign_parser(__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.workdir) as workdir:
        started = time.monotonic()
        report = run(Path(workdir) / "data", objects=args.objects, seed=args.seed)
        report["seconds"] = round(time.monotonic() - started, 1)
    print_report("bitflip", report)


if __name__ == "__main__":
    main()
