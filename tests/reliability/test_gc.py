"""``dask-cache gc``: orphans both ways, crashed writes, sidecar repair, the cap, the lock."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import numpy as np
import pytest

from cache_server.launch import start_server
from storage import LocalStorage, TaskReference
from tests.server.wire import batch_body, encode_array, encode_pickle, new_hash, put
from tests.stress._common import run_cli
from tests.stress.kill_restart import leftovers

pytestmark = pytest.mark.slow


@pytest.fixture(params=["embedded", "cluster"])
def index_of(request: pytest.FixtureRequest) -> tuple[dict[str, str], list[str]]:
    """The embedded Redis, or the session's Redis Cluster (a prefix of the test's own): the
    server's keyword arguments and gc's options for it."""
    if request.param == "embedded":
        return {}, []
    url, prefix = request.getfixturevalue("redis_cluster_url"), f"gc-{new_hash()[:8]}:"
    return {"redis_url": url, "redis_prefix": prefix}, ["--redis-url", url,
                                                         "--redis-prefix", prefix]


def test_gc_repairs_what_crashes_leave(tmp_path: Path, index_of) -> None:
    data_dir = tmp_path / "data"
    on, gc_options = index_of
    kept, dangling, shared = new_hash(), new_hash(), new_hash()
    with start_server(data_dir, **on) as server, httpx.Client(base_url=server.url) as client:
        for task_hash, value in ((kept, 1), (dangling, 2), (shared, 1)):
            assert put(client, task_hash, encode_pickle(value)).status_code == 201
        big = encode_array(np.arange(200_000.0))
        assert put(client, new_hash(), big, compute_seconds=0.1).status_code == 201
        dangling_digest = client.get(f"/v1/entries/{dangling}").json()["digest"]
    storage = LocalStorage(data_dir)
    # An orphan object (a crash between publish and indexing) ...
    orphan = encode_pickle("orphan")
    storage.put(_header(orphan), [orphan.body], digest=orphan.digest,
                task=TaskReference(new_hash()))
    # ... a manifest whose object vanished, crashed writes, a stale sidecar reference.
    shutil.rmtree(storage.object_path(dangling_digest))
    (storage.blobs.root / ".tmp" / "put-crashed").mkdir(parents=True)
    kept_digest = storage.sidecar(encode_pickle(1).digest).digest
    storage.add_task(kept_digest, TaskReference(new_hash(), "deleted-long-ago"))
    assert leftovers(data_dir)["temporary"] == 1

    report = run_cli("gc", "--data-dir", str(data_dir), "--max-bytes", "1MB", *gc_options)
    assert report["temporary_removed"] == 1
    assert report["dangling_entries_removed"] == 1
    assert report["orphan_objects_removed"] == 1
    assert report["sidecars_repaired"] == 1
    assert report["evicted"] == 1  # the 1.6 MB array did not fit 1 MB
    assert report["entries"] == 2
    assert set(storage.sidecar(kept_digest).tasks) == {kept, shared}
    assert leftovers(data_dir) == {"temporary": 0, "object_dirs": 1}
    again = run_cli("gc", "--data-dir", str(data_dir), *gc_options)
    repairs = {k: v for k, v in again.items() if k not in ("entries", "stored_bytes")}
    assert set(repairs.values()) == {0}  # nothing left to repair
    with start_server(data_dir, **on) as server, httpx.Client(base_url=server.url) as client:
        assert client.get(f"/v1/objects/{kept}").status_code == 200
        assert client.get(f"/v1/objects/{dangling}").status_code == 404
        stats = client.get("/v1/stats").json()
        assert stats["entries"] == 2 and stats["stored_bytes"] == report["stored_bytes"]


def _header(encoded):
    from storage import ObjectHeader

    return ObjectHeader.from_wire(encoded.kind, encoded.dtype or None, encoded.shape or None)


def test_gc_verify_finds_corrupt_objects_and_refuses_a_running_server(tmp_path: Path) -> None:
    import subprocess
    import sys

    data_dir = tmp_path / "data"
    task_hash = new_hash()
    with start_server(data_dir) as server, httpx.Client(base_url=server.url) as client:
        assert put(client, task_hash, encode_pickle([1, 2, 3])).status_code == 201
        busy = subprocess.run([sys.executable, "-m", "cache_server", "gc", "--data-dir",
                               str(data_dir)], capture_output=True, text=True, timeout=60)
        assert busy.returncode != 0 and "in use by another" in busy.stderr
        digest = client.get(f"/v1/entries/{task_hash}").json()["digest"]
    blob = LocalStorage(data_dir).object_path(digest) / "blob"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    assert run_cli("gc", "--data-dir", str(data_dir))["corrupt_objects_removed"] == 0
    report = run_cli("gc", "--data-dir", str(data_dir), "--verify")
    assert report["corrupt_objects_removed"] == 1 and report["entries"] == 0
    assert json.dumps(report)


def test_reindex_restores_each_entrys_expiry(tmp_path: Path) -> None:
    """An entry stored with a lifetime (``X-Result-TTL``) keeps it through a lost index:
    the sidecar records the expiry and ``reindex`` restores it (else the entry, rebuilt
    without one, would never expire). Stores one by one and in a batch."""
    data_dir = tmp_path / "data"
    fleeting, lasting = new_hash(), new_hash()
    batched = new_hash()
    with start_server(data_dir) as server, httpx.Client(base_url=server.url) as client:
        assert put(client, fleeting, encode_array(np.arange(200_000.0)),
                   overrides={"ttl": "3600"}).status_code == 201
        assert put(client, lasting, encode_pickle("kept")).status_code == 201
        body = batch_body([(batched, encode_pickle("batched"))], overrides={"ttl": 7200.0})
        assert client.post("/v1/objects/batch", content=body, headers={
            "Content-Type": "application/x-result-batch"}).status_code == 200
        before = {h: client.get(f"/v1/entries/{h}").json()["expires"]
                  for h in (fleeting, lasting, batched)}
    assert before[fleeting] is not None and before[batched] is not None
    assert before[lasting] is None
    shutil.rmtree(data_dir / "redis")  # the embedded Redis loses everything
    report = run_cli("reindex", "--data-dir", str(data_dir))
    assert report["entries_added"] == 3
    with start_server(data_dir) as server, httpx.Client(base_url=server.url) as client:
        after = {h: client.get(f"/v1/entries/{h}").json()["expires"] for h in before}
    assert after == before
