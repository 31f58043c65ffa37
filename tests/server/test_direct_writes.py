"""Direct writes against a real uvicorn process: ``POST /v1/staging`` names a place in the
server's storage, the test writes the object's files there as a worker would, and
``POST /v1/objects/{hash}/commit`` has the server verify them and publish the entry."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest

from cache_server.launch import RunningServer
from storage import ObjectHeader, Staging
from tests.server.wire import Encoded, encode_array, encode_pickle, new_hash
from tests.storage.contract import Encoded as StoredEncoded
from tests.storage.contract import staged_files, write_staged
from tests.stress._common import run_cli


def stage(client: httpx.Client, encoded: Encoded, body: bytes | None = None) -> Staging:
    """Ask for a staging place and write ``encoded``'s files there (``body`` instead of
    its own, to stage something else under its metadata)."""
    request = {"kind": encoded.kind, "dtype": encoded.dtype or None,
               "shape": encoded.shape or None}
    answer = client.post("/v1/staging", json=request)
    assert answer.status_code == 200, answer.text
    staging = Staging(**answer.json())
    header = ObjectHeader.from_wire(encoded.kind, encoded.dtype or None, encoded.shape or None)
    files = staged_files(staging, StoredEncoded(header, body or encoded.body, encoded.digest))
    write_staged(staging, files)
    return staging


def commit(client: httpx.Client, task_hash: str, encoded: Encoded, staging_id: str
           ) -> httpx.Response:
    headers = {**encoded.headers("step", 2.0), "X-Result-Staging": staging_id}
    return client.post(f"/v1/objects/{task_hash}/commit", headers=headers)


def staging_dirs(data_dir: Path) -> list[Path]:
    return [p for p in (data_dir / "objects").glob("*/.staging/*")]


@pytest.mark.parametrize("kind", ["zarr", "blob"])
def test_a_staged_object_is_verified_and_published(client: httpx.Client,
                                                   cache_server: RunningServer,
                                                   kind: str) -> None:
    if kind == "zarr":  # two chunks, the second an edge
        value = np.random.default_rng(0).random((17, 2**17))
        encoded = encode_array(value)
    else:
        encoded = encode_pickle({"rows": list(range(1000))})
    staging = stage(client, encoded)
    assert staging.layout == kind
    task_hash = new_hash()
    assert client.get(f"/v1/entries/{task_hash}").status_code == 404  # staged, not stored
    response = commit(client, task_hash, encoded, staging.id)
    assert response.status_code == 201, response.text
    assert response.json()["storage"] == kind and response.json()["digest"] == encoded.digest
    got = client.get(f"/v1/objects/{task_hash}")
    assert got.status_code == 200 and got.content == encoded.body
    assert staging_dirs(cache_server.data_dir) == []
    # A staging is committed once; an indexed hash answers 200 (its staged files go).
    assert commit(client, new_hash(), encoded, staging.id).status_code == 404
    again = stage(client, encoded)
    assert commit(client, task_hash, encoded, again.id).status_code == 200
    assert staging_dirs(cache_server.data_dir) == []


def test_a_staged_object_whose_digest_does_not_match_is_refused(
        client: httpx.Client, cache_server: RunningServer) -> None:
    value = np.random.default_rng(1).random(2**18)
    encoded = encode_array(value)
    other = value.copy()
    other[12345] += 1.0
    staging = stage(client, encoded, body=other.tobytes())
    task_hash = new_hash()
    before = client.get("/v1/stats").json()["entries"]
    response = commit(client, task_hash, encoded, staging.id)
    assert response.status_code == 400 and "digest" in response.json()["detail"]
    assert client.get(f"/v1/objects/{task_hash}").status_code == 404
    assert client.get("/v1/stats").json()["entries"] == before
    assert staging_dirs(cache_server.data_dir) == []  # refused files removed at once


def test_staging_refuses_what_could_never_be_stored(client: httpx.Client) -> None:
    bad = client.post("/v1/staging", json={"kind": "ndarray", "dtype": "float64",
                                           "shape": "[3]"})
    assert bad.status_code == 422  # not the canonical dtype
    unknown = commit(client, new_hash(), encode_pickle(1), "f" * 32)
    assert unknown.status_code == 404 and "staged" in unknown.json()["detail"]
    malformed = commit(client, new_hash(), encode_pickle(1), "../../etc")
    assert malformed.status_code == 422


@pytest.mark.slow
def test_a_direct_write_that_dies_half_way_leaves_nothing_and_gc_cleans(
        fresh_server, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    server = fresh_server(data_dir=data_dir, embedded=True)
    encoded = encode_array(np.random.default_rng(2).random((40, 2**16)))  # 3 chunks
    with httpx.Client(base_url=server.url) as client:
        stage(client, encoded)
        directory = staging_dirs(data_dir)[0]
        for chunk in sorted(p for p in directory.rglob("*") if p.is_file())[1:]:
            chunk.unlink()  # the worker died after its first chunk
        task_hash = new_hash()
        assert client.get(f"/v1/entries/{task_hash}").status_code == 404
        assert client.post("/v1/lookup", json={"hashes": [task_hash]}).json()["found"] == []
        assert client.get("/v1/stats").json()["stored_bytes"] in (0, None)
    server.stop()
    report = run_cli("gc", "--data-dir", str(data_dir))
    assert report["temporary_removed"] == 1 and report["entries"] == 0
    assert staging_dirs(data_dir) == []
