"""PUT/GET/HEAD /v1/objects/{hash} against a real uvicorn process."""

from __future__ import annotations

import json
from pathlib import Path

import cloudpickle
import httpx
import numpy as np
import pytest

from cache_server.launch import RunningServer
from tests.server.wire import encode_array, encode_pickle, new_hash, pieces, put


def stored_files(data_dir: Path) -> set[Path]:
    return {p for p in (data_dir / "objects").rglob("*") if p.is_file() and ".tmp" not in p.parts}


def test_array_round_trip(client: httpx.Client) -> None:
    value = np.arange(12, dtype=">i4").reshape(3, 4)
    encoded = encode_array(value)
    task_hash = new_hash()
    response = put(
        client, task_hash, encoded, label="step é/1", overrides={"type": "numpy.ndarray"}
    )
    assert response.status_code == 201, response.text
    manifest = response.json()
    assert manifest["hash"] == task_hash
    assert manifest["digest"] == encoded.digest
    assert manifest["kind"] == "ndarray" and manifest["storage"] == "blob"
    assert manifest["dtype"] == ">i4" and manifest["shape"] == [3, 4]
    assert manifest["nbytes"] == 48 and manifest["label"] == "step é/1"
    assert manifest["type"] == "numpy.ndarray" and manifest["compute_seconds"] == 1.5
    assert manifest["hits"] == 0

    got = client.get(f"/v1/objects/{task_hash}")
    assert got.status_code == 200
    assert got.content == encoded.body
    assert got.headers["X-Result-Kind"] == "ndarray"
    assert got.headers["X-Result-Digest"] == encoded.digest
    assert got.headers["X-Result-Dtype"] == ">i4"
    assert got.headers["X-Result-Shape"] == "[3,4]"
    assert got.headers["X-Result-Type"] == "numpy.ndarray"
    assert float(got.headers["X-Result-Compute-Seconds"]) == 1.5
    assert got.headers["X-Result-Label"] == "step%20%C3%A9%2F1"
    assert got.headers["Content-Length"] == "48"
    back = np.frombuffer(got.content, dtype=got.headers["X-Result-Dtype"]).reshape(3, 4)
    np.testing.assert_array_equal(back, value)


def test_pickle_round_trip_streamed(client: httpx.Client) -> None:
    value = {"rows": list(range(1000)), "name": "x" * 3_000_000}
    encoded = encode_pickle(value)
    task_hash = new_hash()
    response = put(client, task_hash, encoded, stream=True)  # chunked, no Content-Length
    assert response.status_code == 201, response.text
    assert response.json()["dtype"] is None and response.json()["shape"] is None
    got = client.get(f"/v1/objects/{task_hash}")
    assert got.status_code == 200 and "X-Result-Dtype" not in got.headers
    assert cloudpickle.loads(got.content) == value


def test_zero_d_and_empty_arrays(client: httpx.Client) -> None:
    for value in (np.array(3.5), np.zeros((0, 4), dtype="<i8"), np.array([b"a\x00"], "S2")):
        encoded = encode_array(value)
        task_hash = new_hash()
        assert put(client, task_hash, encoded).status_code == 201
        got = client.get(f"/v1/objects/{task_hash}")
        assert got.content == encoded.body
        assert got.headers["X-Result-Shape"] == encoded.shape


def test_head(client: httpx.Client, stats) -> None:
    encoded = encode_array(np.ones(5))
    task_hash = new_hash()
    put(client, task_hash, encoded)
    served = stats()["served"]
    head = client.head(f"/v1/objects/{task_hash}")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["Content-Length"] == "40"
    assert head.headers["X-Result-Digest"] == encoded.digest
    assert stats()["served"] == served  # HEAD serves nothing
    assert client.head(f"/v1/objects/{new_hash()}").status_code == 404


def test_put_is_idempotent(client: httpx.Client, stats) -> None:
    encoded = encode_array(np.arange(7.0))
    task_hash = new_hash()
    first = put(client, task_hash, encoded, label="first")
    before = stats()
    again = put(client, task_hash, encode_array(np.arange(3.0)), label="second")
    assert again.status_code == 200
    assert again.json()["digest"] == encoded.digest and again.json()["label"] == "first"
    assert again.json()["created"] == first.json()["created"]
    after = stats()
    assert after["stores"] == before["stores"] and after["entries"] == before["entries"]
    assert client.get(f"/v1/objects/{task_hash}").content == encoded.body


def test_unknown_hash_is_404(client: httpx.Client) -> None:
    for response in (
        client.get(f"/v1/objects/{new_hash()}"),
        client.head(f"/v1/objects/{new_hash()}"),
    ):
        assert response.status_code == 404
    body = client.get(f"/v1/objects/{new_hash()}").json()
    assert isinstance(body["detail"], str) and "no entry" in body["detail"]


@pytest.mark.parametrize("bad", ["A" * 32, "a" * 31, "a" * 33, "g" * 32, "../" + "a" * 29])
def test_malformed_hash_is_422(client: httpx.Client, bad: str) -> None:
    encoded = encode_array(np.ones(2))
    for response in (
        put(client, bad, encoded),
        client.get(f"/v1/objects/{bad}"),
        client.head(f"/v1/objects/{bad}"),
        client.get(f"/v1/entries/{bad}"),
        client.delete(f"/v1/entries/{bad}"),
    ):
        # A path with "/" in it does not match the route at all: 404, also without effects.
        assert response.status_code == (404 if "/" in bad else 422), response.text
        if response.request.method != "HEAD":
            assert isinstance(response.json()["detail"], str)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"kind": None}, "X-Result-Kind"),
        ({"digest": None}, "X-Result-Digest"),
        ({"compute_seconds": None}, "X-Result-Compute-Seconds"),
        ({"label": None}, "X-Result-Label"),
        ({"dtype": None}, "dtype"),
        ({"shape": None}, "shape"),
        ({"kind": "numpy"}, "kind"),
        ({"digest": "XYZ"}, "Digest"),
        ({"compute_seconds": "-1"}, "Compute-Seconds"),
        ({"compute_seconds": "nan"}, "Compute-Seconds"),
        ({"compute_seconds": "soon"}, "Compute-Seconds"),
        ({"label": "%FF"}, "Label"),
        ({"dtype": "float64"}, "canonical"),
        ({"dtype": "|O"}, "cannot travel"),
        ({"dtype": "<f8,<i4"}, "dtype"),
        ({"dtype": "nonsense"}, "dtype"),
        ({"shape": "[2, 3]"}, "canonical"),
        ({"shape": "[-6]"}, "shape"),
        ({"shape": "6"}, "shape"),
        ({"shape": "[true]"}, "shape"),
    ],
)
def test_bad_headers_are_422_without_effects(
    client: httpx.Client, cache_server: RunningServer, stats, overrides: dict, fragment: str
) -> None:
    encoded = encode_array(np.ones((2, 3)))
    task_hash = new_hash()
    before = stats()
    response = put(client, task_hash, encoded, overrides=overrides)
    assert response.status_code == 422, response.text
    assert fragment.lower() in response.json()["detail"].lower()
    assert stats()["stores"] == before["stores"]
    assert client.get(f"/v1/entries/{task_hash}").status_code == 404


def test_digest_mismatch_is_400_without_effects(
    client: httpx.Client, cache_server: RunningServer, stats
) -> None:
    encoded = encode_array(np.arange(1000.0))
    task_hash = new_hash()
    files = stored_files(cache_server.data_dir)
    wrong = encode_array(np.arange(1000.0) + 1).digest
    for stream in (False, True):
        response = put(client, task_hash, encoded, overrides={"digest": wrong}, stream=stream)
        assert response.status_code == 400, response.text
        assert "digest" in response.json()["detail"]
    assert client.get(f"/v1/entries/{task_hash}").status_code == 404
    assert stored_files(cache_server.data_dir) == files


def test_body_that_does_not_fit_dtype_and_shape_is_400(
    client: httpx.Client, cache_server: RunningServer
) -> None:
    task_hash = new_hash()
    files = stored_files(cache_server.data_dir)
    for body in (b"\x00" * 40, b"\x00" * 56):  # shape [6] of <f8 needs 48 bytes
        encoded = encode_array(np.zeros(6))
        encoded.body = body
        encoded.__post_init__()
        for stream in (False, True):
            response = put(client, task_hash, encoded, stream=stream)
            assert response.status_code == 400, response.text
            assert "bytes" in response.json()["detail"]
    bools = encode_array(np.zeros(3, dtype=bool))
    bools.body = b"\x00\x02\x01"
    bools.__post_init__()
    assert put(client, task_hash, bools).status_code == 400
    assert client.get(f"/v1/entries/{task_hash}").status_code == 404
    assert stored_files(cache_server.data_dir) == files


def test_corrupt_object_is_dropped_and_404(
    client: httpx.Client, cache_server: RunningServer, stats
) -> None:
    encoded = encode_array(np.arange(100, dtype="<i8"))
    task_hash = new_hash()
    put(client, task_hash, encoded, label="fragile")
    directory = cache_server.data_dir / "objects" / "blob" / encoded.digest[:2] / encoded.digest
    blob = directory / "blob"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 0xFF
    blob.write_bytes(bytes(data))
    before = stats()
    response = client.get(f"/v1/objects/{task_hash}")
    assert response.status_code == 404
    after = stats()
    assert after["corrupt"] == before["corrupt"] + 1 and after["served"] == before["served"]
    assert client.get(f"/v1/entries/{task_hash}").status_code == 404
    assert task_hash not in client.post("/v1/lookup", json={"hashes": [task_hash]}).json()["found"]
    assert not directory.exists()
    events = client.get("/v1/events", params={"limit": 1000}).json()["events"]
    assert {"kind": "corrupt", "hash": task_hash, "label": "fragile"}.items() <= next(
        e for e in events if e.get("hash") == task_hash
    ).items()
    # Storing it again works.
    assert put(client, task_hash, encoded).status_code == 201
    assert client.get(f"/v1/objects/{task_hash}").content == encoded.body


def test_missing_object_is_dropped_on_head(
    client: httpx.Client, cache_server: RunningServer
) -> None:
    encoded = encode_pickle("gone soon")
    task_hash = new_hash()
    put(client, task_hash, encoded)
    directory = cache_server.data_dir / "objects" / "blob" / encoded.digest[:2] / encoded.digest
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()
    assert client.head(f"/v1/objects/{task_hash}").status_code == 404
    assert client.get(f"/v1/entries/{task_hash}").status_code == 404


@pytest.mark.slow
def test_64_mib_float64_round_trip_stored_as_zarr(
    client: httpx.Client, cache_server: RunningServer
) -> None:
    value = np.random.default_rng(7).standard_normal(8 * 2**20)  # 64 MiB
    encoded = encode_array(value)
    task_hash = new_hash()
    response = client.put(
        f"/v1/objects/{task_hash}", content=pieces(encoded.body), headers=encoded.headers()
    )
    assert response.status_code == 201, response.text
    assert response.json()["storage"] == "zarr" and response.json()["nbytes"] == 64 * 2**20
    array_dir = cache_server.data_dir / "objects" / "zarr" / encoded.digest[:2] / encoded.digest
    metadata = json.loads((array_dir / "zarr.json").read_text())
    assert metadata["node_type"] == "array" and metadata["shape"] == [8 * 2**20]
    with client.stream("GET", f"/v1/objects/{task_hash}") as got:
        assert got.status_code == 200
        assert int(got.headers["Content-Length"]) == 64 * 2**20
        received = bytearray()
        for chunk in got.iter_bytes():
            received += chunk
    assert received == encoded.body
    back = np.frombuffer(received, dtype="<f8")
    assert np.array_equal(back, value)
