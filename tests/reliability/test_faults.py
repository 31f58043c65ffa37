"""The fault tests of issue 6 at sizes that run in seconds; the same campaigns run at full
size as scripts (``python -m tests.stress.<name>``, figures in RELIABILITY.md)."""

from __future__ import annotations

import uuid
from pathlib import Path

import dask.array as da
import httpx
import numpy as np
import pytest

from tests.conftest import FreshServer
from tests.stress import bitflip, disk_full, kill_restart, redis_loss, same_hash

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("batch", [0, 8], ids=["put", "batched"])
def test_kill_during_concurrent_stores_loses_nothing_and_gc_cleans(tmp_path: Path,
                                                                   batch: int) -> None:
    # batched: kill -9 during group commits (POST /v1/objects/batch), 8 objects each
    report = kill_restart.run(tmp_path / "data", rounds=2, stores=16 * (1 + batch // 2),
                              workers=8, seed=1, batch=batch)
    assert report["kills"] == 2 and report["acknowledged"] > 0
    assert report["lost"] == 0  # every acknowledged store survived the kill
    assert report["wrong_served"] == 0 and report["unexpected_status"] == 0
    assert report["verified_after_restart"] == report["indexed"]
    assert report["temporary_after_gc"] == 0
    assert report["object_dirs_after_gc"] == report["gc"]["entries"] == report["indexed_after_gc"]
    assert report["verified_after_gc"] == report["indexed_after_gc"] == report["indexed"]


def test_redis_restart_keeps_entries_and_reindex_restores_all(tmp_path: Path) -> None:
    report = redis_loss.run(tmp_path, entries=24, pin_every=5, seed=2)
    assert report["stored"] == 24
    assert report["lost_in_restart"] == 0 and report["verified_after_redis_restart"] == 24
    assert report["reindex"]["entries_added"] == 24
    assert report["lost_in_reindex"] == 0 and report["verified_after_reindex"] == 24
    assert report["restored_pins"] == report["pinned"] == 5 and report["wrong_pins"] == 0


def test_flipped_bytes_are_detected_never_served(tmp_path: Path) -> None:
    report = bitflip.run(tmp_path / "data", objects=12, seed=3)
    assert report["zarr_objects"] >= 3 and report["blob_objects"] >= 3
    assert report["detected"] == report["counted_corrupt"] == 12
    assert report["served_anyway"] == 0 and report["still_indexed"] == 0


def test_cached_compute_recomputes_corrupt_zarr_results(fresh_server: FreshServer) -> None:
    server = fresh_server()
    ns = uuid.uuid4().hex
    x = da.from_array(np.arange(600_000.0).reshape(3, 200_000), chunks=(1, 200_000))
    expr = np.sqrt(x) * 3  # three 1.6 MB chunks: Zarr objects
    expected = np.sqrt(np.arange(600_000.0).reshape(3, 200_000)) * 3
    from client_lib import cached_compute, last_report

    (cold,) = cached_compute(expr, cache=server.url, namespace=ns, policy="all",
                             scheduler="threads")
    np.testing.assert_array_equal(cold, expected)
    with httpx.Client(base_url=server.url) as client:
        zarr_entries = [e for e in client.get("/v1/entries", params={"limit": 1000})
                        .json()["entries"] if e["storage"] == "zarr"]
    assert zarr_entries
    import random

    rng = random.Random(4)
    for entry in zarr_entries:
        bitflip.flip_byte(bitflip.payload_file(server.data_dir, "zarr", entry["digest"]), rng)
    (warm,) = cached_compute(expr, cache=server.url, namespace=ns, policy="all",
                             scheduler="threads")
    np.testing.assert_array_equal(warm, expected)
    assert last_report().retried  # a corrupt load was refused and recomputed
    (again,) = cached_compute(expr, cache=server.url, namespace=ns, scheduler="threads")
    np.testing.assert_array_equal(again, expected)
    assert not last_report().retried and last_report().computed == 0


def test_many_clients_storing_one_hash(tmp_path: Path) -> None:
    report = same_hash.run(tmp_path / "data", clients=50, rounds=1, seed=5)
    assert report["requests"] == 100 and report["statuses"]["201"] == 2
    assert set(report["statuses"]) == {"200", "201"}
    assert report["entries"] == 2 and report["rounds_with_problems"] == 0


def test_size_cap_evicts_and_refuses_with_507(tmp_path: Path, redis_url: str) -> None:
    cap = 3 * 2**20
    report = disk_full.run_cap(tmp_path / "data", cap=cap, stores=40, seed=6,
                               redis_url=redis_url)
    assert report["bytes_offered"] > 2 * cap and report["evictions"] > 0
    assert set(report["statuses"]) == {"201"}
    assert report["max_stored_bytes_seen"] <= cap and report["stored_bytes"] <= cap
    assert report["over_cap_status"] == 507
    assert report["full_of_pins_status"] == 507 and "pinned" in report["full_of_pins_message"]
    assert report["survivors_verified"] == report["entries"] > 0
    assert report["reads_verified_when_full"] == report["entries"]
    assert report["wrong_served"] == 0


def test_full_disk_is_507_and_reads_go_on(tmp_path: Path, redis_url: str) -> None:
    report = disk_full.run_full_disk(tmp_path / "disk", disk=4 * 2**20, stores=40,
                                     redis_url=redis_url, seed=7)
    assert report["statuses"].get("507", 0) > 0 and report["statuses"].get("201", 0) > 0
    assert set(report["statuses"]) == {"201", "507"}
    assert all("disk is full" in m for m in report["disk_full_messages"])
    assert report["acked_verified"] == report["statuses"]["201"]
    assert report["wrong_served"] == 0 and report["lost"] == 0
    assert report["temporary_left"] == 0 and report["healthz"] == 200


def test_cached_compute_is_correct_when_results_do_not_fit(fresh_server: FreshServer,
                                                           caplog) -> None:
    from client_lib import cached_compute

    server = fresh_server(max_bytes=3 * 2**20)
    ns = uuid.uuid4().hex
    big = da.random.default_rng(8).random((4, 300_000), chunks=(1, 300_000))  # 2.4 MB chunks
    expr = [big + 1, (big + 1).sum(axis=1), da.ones(600_000, chunks=600_000) * 2]  # 4.8 MB
    expected = [np.asarray(e.compute(scheduler="threads")) for e in expr]
    for _ in range(2):
        results = cached_compute(*expr, cache=server.url, namespace=ns, policy="all",
                                 scheduler="threads")
        for got, want in zip(results, expected, strict=True):
            np.testing.assert_array_equal(got, want)
    # 507 means "not stored", not "server unavailable": no warning about it.
    assert not [r for r in caplog.records if "storing results failed" in r.getMessage()]
    stats = httpx.get(f"{server.url}/v1/stats").json()
    assert 0 < stats["stored_bytes"] <= 3 * 2**20 and stats["evictions"] > 0


@pytest.mark.parametrize("direct_read", ["never", "auto"])
def test_bodies_sent_unread_are_verified_by_the_client_and_dropped_when_corrupt(
        fresh_server: FreshServer, direct_read: str) -> None:
    """Bodies of at least zero_copy_min_bytes go from their files to the socket unread
    (docs/design/data-plane.md, Zero-copy bodies): the client's digest check refuses a flipped byte,
    it reports the entry, and the server verifies the object itself and drops it."""
    import dask

    from client_lib import CacheClient, CacheEntryCorrupt

    server = fresh_server()
    value = np.random.default_rng(5).random(3 * 2**21)  # 48 MiB: three 16 MiB chunks
    client = CacheClient(server.url)
    task_hash, sound = uuid.uuid4().hex, uuid.uuid4().hex
    assert client.put(task_hash, value, 1.0, "big")
    assert client.put(sound, value + 1, 1.0, "big")
    digest = client.entry(task_hash)["digest"]
    chunk = server.data_dir / "objects" / "zarr" / digest[:2] / digest / "c" / "1"
    data = bytearray(chunk.read_bytes())
    data[12345] ^= 0x10
    chunk.write_bytes(bytes(data))
    with dask.config.set({"result-cache.direct-read": direct_read}):
        with pytest.raises(CacheEntryCorrupt):
            client.get(task_hash)
        np.testing.assert_array_equal(client.get(sound), value + 1)
    with httpx.Client(base_url=server.url) as http:
        assert http.get(f"/v1/entries/{task_hash}").status_code == 404
        assert http.get("/v1/stats").json()["corrupt"] == 1
        # A report about a sound object removes nothing (the client's word is not enough).
        assert http.post(f"/v1/entries/{sound}/corrupt").json() == {"corrupt": False}
        assert http.get(f"/v1/entries/{sound}").status_code == 200
