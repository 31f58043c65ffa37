"""POST /v1/lookup."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from tests.conftest import FreshServer
from tests.server.wire import encode_array, new_hash, put


def test_found_subset_in_request_order_duplicates_once(client: httpx.Client, stats) -> None:
    stored = [new_hash() for _ in range(3)]
    for n, task_hash in enumerate(stored):
        put(client, task_hash, encode_array(np.full(4, n)))
    absent = [new_hash() for _ in range(2)]
    asked = [absent[0], stored[2], stored[0], stored[2], absent[1], absent[0], stored[1]]
    before = stats()
    response = client.post("/v1/lookup", json={"hashes": asked})
    assert response.status_code == 200
    assert response.json() == {"found": [stored[2], stored[0], stored[1]]}
    after = stats()
    assert after["lookups"] - before["lookups"] == 5  # distinct hashes asked
    assert after["misses"] - before["misses"] == 2
    assert after["found"] - before["found"] == 3  # hits are lookups found
    assert after["hits"] - before["hits"] == 3
    assert after["served"] == before["served"]  # objects served are counted on GET


def test_empty_lookup(client: httpx.Client) -> None:
    assert client.post("/v1/lookup", json={"hashes": []}).json() == {"found": []}


def test_large_batch(client: httpx.Client) -> None:
    task_hash = new_hash()
    put(client, task_hash, encode_array(np.zeros(1)))
    hashes = [new_hash() for _ in range(20_000)] + [task_hash]
    assert client.post("/v1/lookup", json={"hashes": hashes}).json() == {"found": [task_hash]}


def test_malformed_requests_are_422_without_effects(client: httpx.Client, stats) -> None:
    before = stats()
    bad_bodies = [
        b"{not json",
        b'{"hashes": "abc"}',
        b'{"hashes": [1, 2]}',
        b'{"hash": []}',
        b"[]",
        json.dumps({"hashes": [new_hash(), "Z" * 32]}).encode(),
        json.dumps({"hashes": [new_hash() + "0"]}).encode(),
        # Lengths that add up to 32 each on average, and characters outside ASCII.
        json.dumps({"hashes": [new_hash()[:31], new_hash() + "a"]}).encode(),
        json.dumps({"hashes": [new_hash()[:31] + "\u00e9"]}).encode(),
        json.dumps({"hashes": [new_hash().upper()]}).encode(),
    ]
    for body in bad_bodies:
        response = client.post(
            "/v1/lookup", content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 422, body
        assert isinstance(response.json()["detail"], str) and response.json()["detail"]
    assert stats()["lookups"] == before["lookups"]


@pytest.mark.slow
def test_too_many_hashes_is_422(fresh_server: FreshServer) -> None:
    server = fresh_server(max_lookup_hashes=3)
    with httpx.Client(base_url=server.url) as client:
        assert client.post("/v1/lookup", json={"hashes": [new_hash()] * 3}).status_code == 200
        response = client.post("/v1/lookup", json={"hashes": [new_hash() for _ in range(4)]})
        assert response.status_code == 422
        assert "limit" in response.json()["detail"]
        assert client.get("/v1/stats").json()["lookups"] == 1


# -- POST /v1/lookup/packed ------------------------------------------------------------------

PACKED = {"Content-Type": "application/octet-stream"}


def test_packed_lookup_answers_one_flag_per_hash_in_order(client: httpx.Client, stats) -> None:
    stored = [new_hash() for _ in range(3)]
    for n, task_hash in enumerate(stored):
        put(client, task_hash, encode_array(np.full(2, n)))
    asked = [new_hash(), stored[2], stored[0], new_hash(), stored[1]]
    before = stats()
    response = client.post("/v1/lookup/packed", content="".join(asked).encode(), headers=PACKED)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    assert response.content == bytes([0, 1, 1, 0, 1])
    after = stats()
    assert after["lookups"] - before["lookups"] == 5
    assert after["misses"] - before["misses"] == 2
    assert after["found"] - before["found"] == 3
    assert client.post("/v1/lookup/packed", content=b"", headers=PACKED).content == b""


def test_packed_lookup_agrees_with_json_on_a_large_batch(client: httpx.Client) -> None:
    stored = new_hash()
    put(client, stored, encode_array(np.zeros(1)))
    hashes = [new_hash() for _ in range(30_000)]
    hashes[12_345] = stored
    flags = client.post("/v1/lookup/packed", content="".join(hashes).encode(),
                        headers=PACKED).content
    assert [h for h, f in zip(hashes, flags, strict=True) if f] == [stored]
    assert client.post("/v1/lookup", json={"hashes": hashes}).json() == {"found": [stored]}


def test_packed_lookup_refuses_malformed_bodies_without_effects(client: httpx.Client,
                                                                stats) -> None:
    before = stats()
    good = new_hash()
    for body in (good.encode() + b"0", (good[:31] + "g").encode(), good.upper().encode(),
                 (good + good[:16]).encode(), "é".encode() * 16):
        response = client.post("/v1/lookup/packed", content=body, headers=PACKED)
        assert response.status_code == 422, body
        assert response.json()["detail"]
    assert stats()["lookups"] == before["lookups"]


@pytest.mark.slow
def test_packed_lookup_limit(fresh_server: FreshServer) -> None:
    server = fresh_server(max_lookup_hashes=3)
    with httpx.Client(base_url=server.url) as client:
        four = "".join(new_hash() for _ in range(4)).encode()
        response = client.post("/v1/lookup/packed", content=four, headers=PACKED)
        assert response.status_code == 422 and "limit" in response.json()["detail"]
        assert client.post("/v1/lookup/packed", content=four[:96], headers=PACKED).content == (
            bytes(3))
