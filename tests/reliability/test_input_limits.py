"""Input limits: JSON body size, label and type length; pickles are never unpickled."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import httpx
import pytest

from tests.conftest import FreshServer
from tests.server.wire import Encoded, encode_pickle, new_hash, put


@pytest.mark.slow
def test_json_bodies_are_limited(fresh_server: FreshServer) -> None:
    server = fresh_server(max_json_bytes=10_000)
    with httpx.Client(base_url=server.url) as client:
        hashes = [new_hash() for _ in range(400)]  # ~14 KB of JSON
        response = client.post("/v1/lookup", json={"hashes": hashes})
        assert response.status_code == 413 and "max_json_bytes" in response.json()["detail"]
        chunked = client.post("/v1/lookup", content=iter([b'{"hashes": [', b'"0"' * 5000, b"]}"]),
                              headers={"Content-Type": "application/json"})
        assert chunked.status_code == 413 and "max_json_bytes" in chunked.json()["detail"]
        assert client.post("/v1/lookup", json={"hashes": hashes[:100]}).status_code == 200
        for bad in (b"[]", b'{"hashes": "x"}', b'{"hashes": [1]}', b"{", b'{"other": []}'):
            response = client.post("/v1/lookup", content=bad,
                                   headers={"Content-Type": "application/json"})
            assert response.status_code == 422, bad
            assert isinstance(response.json()["detail"], str)


def test_labels_and_types_are_bounded(cache_server) -> None:
    with httpx.Client(base_url=cache_server.url) as client:
        value = encode_pickle(1)
        long_label = put(client, new_hash(), value, label="x" * 1025)
        assert long_label.status_code == 422 and "Label" in long_label.json()["detail"]
        long_type = put(client, new_hash(), value, overrides={"type": "t" * 513})
        assert long_type.status_code == 422 and "Type" in long_type.json()["detail"]
        listing = client.get("/v1/entries", params={"label": "y" * 1025})
        assert listing.status_code == 422


class _Bomb:
    """Unpickling this creates a file: proof that someone unpickled it."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_the_server_never_unpickles(cache_server, tmp_path: Path) -> None:
    marker = tmp_path / "unpickled"
    encoded = Encoded("pickle", pickle.dumps(_Bomb(str(marker))))
    task_hash = new_hash()
    with httpx.Client(base_url=cache_server.url) as client:
        assert put(client, task_hash, encoded).status_code == 201
        assert client.get(f"/v1/objects/{task_hash}").content == encoded.body
        assert client.get(f"/v1/entries/{task_hash}").status_code == 200
    assert not marker.exists()
