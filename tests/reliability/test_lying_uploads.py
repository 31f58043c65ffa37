"""Uploads that lie, under a size cap (issue 11, items 3 and 6).

Before: with ``max_bytes`` 64 MiB and six 8 MiB entries, a chunked ``PUT`` declaring a
60 MiB array and sending 16 bytes got 400, but all six entries had been evicted first (room
was made for the declared size). Now room is made only for bytes received and verified.

Before: 16 concurrent ``PUT`` s of one hash with different bodies left 15 objects on disk
that no entry referenced and no cap counted, until an offline ``gc``. Now the losers remove
theirs at once and evict nothing. The same attacks at full size:
``python -m tests.stress.liars`` (figures in RELIABILITY.md).
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest

from tests.conftest import FreshServer
from tests.server.wire import encode_array, encode_pickle, new_hash, pieces, put
from tests.stress.liars import disk_bytes, object_dirs, same_hash_race

pytestmark = pytest.mark.slow

MiB = 2**20


def test_a_lying_upload_evicts_nothing(fresh_server: FreshServer) -> None:
    server = fresh_server(max_bytes=4 * MiB)
    rng = np.random.default_rng(3)
    values = {new_hash(): encode_array(rng.random(80_000)) for _ in range(6)}  # 640 kB each
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for task_hash, value in values.items():
            assert put(client, task_hash, value).status_code == 201
        before = client.get("/v1/stats").json()
        # Declares 3.75 MiB (fits the cap only by evicting five entries), sends 16 bytes,
        # chunked (no Content-Length to refuse it by).
        liar = encode_array(np.zeros(2))
        declared = {"shape": f"[{15 * MiB // 32}]"}
        response = put(client, new_hash(), liar, stream=True, overrides=declared)
        assert response.status_code == 400
        # A digest that does not match the (complete) body: refused too, also evicting nothing.
        wrong = {"digest": new_hash()}
        assert put(client, new_hash(), encode_array(rng.random(400_000)), stream=True,
                   overrides=wrong).status_code == 400
        after = client.get("/v1/stats").json()
        assert after["evictions"] == before["evictions"] == 0
        assert after["entries"] == 6 and after["stored_bytes"] == before["stored_bytes"]
        for task_hash, value in values.items():
            assert client.get(f"/v1/objects/{task_hash}").content == value.body
        # A true upload of that size does make room, by evicting for its real bytes.
        honest = encode_array(rng.random(15 * MiB // 32))
        assert put(client, new_hash(), honest, stream=True).status_code == 201
        final = client.get("/v1/stats").json()
        assert final["evictions"] >= 5 and final["stored_bytes"] <= 4 * MiB


def test_same_hash_different_bodies_leaves_one_counted_object(
        fresh_server: FreshServer) -> None:
    server = fresh_server(max_bytes=5 * MiB)
    rng = np.random.default_rng(4)
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for _ in range(4):  # 4.4 MB of 5 MiB: one more 1.1 MB object needs room
            assert put(client, new_hash(), encode_array(rng.random(137_500))).status_code == 201
        before = client.get("/v1/stats").json()
        # Zarr-sized arrays, small arrays (blobs) and pickles, all for one hash.
        bodies = [encode_array(rng.random(137_500)) for _ in range(6)]
        bodies += [encode_array(rng.random(100)) for _ in range(3)]
        bodies += [encode_pickle(rng.random(50).tolist()) for _ in range(3)]
        statuses = same_hash_race(server.url, bodies)
        assert statuses == {201: 1, 200: len(bodies) - 1}
        stats = client.get("/v1/stats").json()
    # A large winner needs room and evicts one of the four; a small one fits.
    evicted = stats["evictions"] - before["evictions"]
    assert evicted <= 1  # the winner made room for itself; the losers for nothing
    assert stats["entries"] == 5 - evicted
    assert len(object_dirs(server.data_dir)) == 5 - evicted  # no orphan
    # Every byte on disk is counted (but for sidecars and Zarr metadata: < 8 kB an object).
    assert 0 <= disk_bytes(server.data_dir) - stats["stored_bytes"] < 5 * 8000


def test_pieces_helper_streams_without_length() -> None:
    """The attack depends on a chunked body: the helper must not send Content-Length."""
    request = httpx.Request("PUT", "http://x/", content=pieces(b"abc"))
    assert "content-length" not in request.headers
