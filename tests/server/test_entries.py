"""GET /v1/entries, GET and DELETE /v1/entries/{hash}."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from cache_server.launch import RunningServer
from tests.conftest import FreshServer
from tests.server.wire import encode_array, encode_pickle, new_hash, put


def object_dir(server: RunningServer, storage: str, digest: str) -> Path:
    return server.data_dir / "objects" / storage / digest[:2] / digest


def test_manifest(client: httpx.Client) -> None:
    encoded = encode_array(np.ones((2, 2), dtype="<c8"))
    task_hash = new_hash()
    put(client, task_hash, encoded, label="make_grid", compute_seconds=2.25)
    client.get(f"/v1/objects/{task_hash}")
    client.get(f"/v1/objects/{task_hash}")
    manifest = client.get(f"/v1/entries/{task_hash}").json()
    assert manifest["hash"] == task_hash and manifest["digest"] == encoded.digest
    assert manifest["kind"] == "ndarray" and manifest["storage"] == "blob"
    assert manifest["nbytes"] == 32 and manifest["dtype"] == "<c8" and manifest["shape"] == [2, 2]
    assert manifest["label"] == "make_grid" and manifest["compute_seconds"] == 2.25
    assert manifest["hits"] == 2
    assert manifest["last_access"] >= manifest["created"] > 0
    assert set(manifest) == {
        "hash", "digest", "kind", "storage", "nbytes", "dtype", "shape", "type",
        "compute_seconds", "label", "created", "last_access", "hits", "pinned", "signature",
        "expires",
    }  # fmt: skip
    assert manifest["pinned"] is False and manifest["signature"] is None  # stored unsigned
    assert manifest["expires"] is None
    assert client.get(f"/v1/entries/{new_hash()}").status_code == 404


@pytest.mark.slow
def test_listing_pages_through_everything_once(fresh_server: FreshServer) -> None:
    server = fresh_server()
    with httpx.Client(base_url=server.url) as client:
        stored = sorted(new_hash() for _ in range(7))
        for n, task_hash in enumerate(stored):
            put(client, task_hash, encode_pickle(n), label="even" if n % 2 == 0 else "odd")
        seen, cursor, pages = [], None, 0
        while True:
            params = {"limit": 3} | ({"cursor": cursor} if cursor else {})
            page = client.get("/v1/entries", params=params).json()
            seen += [entry["hash"] for entry in page["entries"]]
            pages += 1
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == stored and pages == 3
        evens = client.get("/v1/entries", params={"label": "even", "limit": 1000}).json()
        assert [e["hash"] for e in evens["entries"]] == stored[::2]
        assert evens["next_cursor"] is None
        none = client.get("/v1/entries", params={"label": "nope"}).json()
        assert none == {"entries": [], "next_cursor": None}


@pytest.mark.parametrize(
    "params", [{"limit": 0}, {"limit": 1001}, {"limit": "x"}, {"cursor": "not-a-hash"}]
)
def test_listing_bad_query_is_422(client: httpx.Client, params: dict) -> None:
    response = client.get("/v1/entries", params=params)
    assert response.status_code == 422 and isinstance(response.json()["detail"], str)


def test_delete_keeps_shared_objects_until_unreferenced(
    client: httpx.Client, cache_server: RunningServer, stats
) -> None:
    encoded = encode_array(np.arange(50, dtype="<i8"))  # same value from two tasks
    first, second = new_hash(), new_hash()
    assert put(client, first, encoded, label="a").status_code == 201
    assert put(client, second, encoded, label="b").status_code == 201
    directory = object_dir(cache_server, "blob", encoded.digest)
    assert directory.is_dir()

    before = stats()
    assert client.delete(f"/v1/entries/{first}").status_code == 204
    after = stats()
    assert after["entries"] == before["entries"] - 1
    assert after["bytes"] == before["bytes"] - len(encoded.body)
    assert after["deletes"] == before["deletes"] + 1
    assert client.get(f"/v1/entries/{first}").status_code == 404
    assert client.get(f"/v1/objects/{first}").status_code == 404
    assert client.post("/v1/lookup", json={"hashes": [first, second]}).json() == {"found": [second]}
    assert directory.is_dir()  # still referenced by `second`
    assert client.get(f"/v1/objects/{second}").content == encoded.body

    assert client.delete(f"/v1/entries/{second}").status_code == 204
    assert not directory.exists()
    assert client.delete(f"/v1/entries/{second}").status_code == 404


def test_sidecar_records_every_referencing_task(
    client: httpx.Client, cache_server: RunningServer
) -> None:
    """Enough in storage alone to rebuild the index (reindex)."""
    import json

    encoded = encode_pickle({"shared": True})
    first, second = new_hash(), new_hash()
    put(client, first, encoded, label="a", compute_seconds=1.0)
    put(client, second, encoded, label="b", compute_seconds=2.0)
    sidecar_path = object_dir(cache_server, "blob", encoded.digest) / "sidecar.json"
    sidecar = json.loads(sidecar_path.read_text())
    assert sidecar["digest"] == encoded.digest and sidecar["kind"] == "pickle"
    assert sidecar["tasks"][first]["label"] == "a"
    assert sidecar["tasks"][second]["compute_seconds"] == 2.0
    client.delete(f"/v1/entries/{first}")
    assert set(json.loads(sidecar_path.read_text())["tasks"]) == {second}


def test_delete_unknown_is_404(client: httpx.Client) -> None:
    response = client.delete(f"/v1/entries/{new_hash()}")
    assert response.status_code == 404 and "no entry" in response.json()["detail"]
