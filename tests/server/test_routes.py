"""The routes in process: ``create_app`` with its lifespan, through httpx's ASGI transport,
on a real Redis. Every status of the error table is answered once, as docs/protocol.md says
(the end-to-end tests beside this one do the same over a real socket)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest

import storage.errors
from cache_server.api.errors import STATUS, status_of
from cache_server.service import errors as service_errors
from tests._servers import free_port
from tests.server.wire import Encoded, encode_array, encode_pickle, new_hash

pytestmark = pytest.mark.anyio

MakeApp = Callable[..., Any]  # the make_app fixture


async def put(client: httpx.AsyncClient, task_hash: str, encoded: Encoded,
              **headers: str) -> httpx.Response:
    return await client.put(f"/v1/objects/{task_hash}", content=encoded.body,
                            headers={**encoded.headers(label="step"), **headers})


async def test_an_entry_from_store_to_delete(make_app: MakeApp) -> None:
    client = await make_app()
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    encoded = encode_array(np.arange(12, dtype="<i4").reshape(3, 4))
    task_hash = new_hash()
    stored = await put(client, task_hash, encoded)
    assert stored.status_code == 201 and stored.json()["shape"] == [3, 4]
    assert (await put(client, task_hash, encoded)).status_code == 200
    got = await client.get(f"/v1/objects/{task_hash}")
    assert got.content == encoded.body
    assert (got.headers["X-Result-Digest"], got.headers["X-Result-Shape"]) == (encoded.digest,
                                                                               "[3,4]")
    head = await client.head(f"/v1/objects/{task_hash}")
    assert head.headers["Content-Length"] == "48" and head.content == b""
    found = await client.post("/v1/lookup", json={"hashes": [task_hash, new_hash()]})
    assert found.json() == {"found": [task_hash]}
    packed = await client.post("/v1/lookup/packed", content=(new_hash() + task_hash).encode(),
                               headers={"Content-Type": "application/octet-stream"})
    assert packed.content == b"\x00\x01"
    assert (await client.post(f"/v1/entries/{task_hash}/pin")).json()["pinned"] is True
    listed = (await client.get("/v1/entries", params={"label": "step"})).json()
    assert [e["hash"] for e in listed["entries"]] == [task_hash] and listed["next_cursor"] is None
    stats = (await client.get("/v1/stats")).json()
    assert (stats["entries"], stats["stores"], stats["served"], stats["pinned"]) == (1, 1, 1, 1)
    assert (stats["found"], stats["hits"], stats["misses"]) == (2, 2, 2)
    kinds = [e["kind"] for e in (await client.get("/v1/events")).json()["events"]]
    assert kinds == ["lookup", "lookup", "hit", "store"]
    assert (await client.delete(f"/v1/entries/{task_hash}")).status_code == 204
    assert (await client.get(f"/v1/entries/{task_hash}")).status_code == 404
    metrics = (await client.get("/metrics")).text
    assert 'route="/v1/objects/{task_hash}",status="201"' in metrics


async def test_every_error_status_of_the_protocol(make_app: MakeApp) -> None:
    client = await make_app(max_body_bytes=5000, max_bytes=20_000)
    small = encode_pickle("small")

    async def status(response: Any) -> int:
        response = await response
        assert set(response.json()) == {"detail"} and response.json()["detail"]
        return response.status_code

    assert await status(client.get(f"/v1/objects/{new_hash()}")) == 404
    assert await status(put(client, new_hash(), encode_pickle(b"x" * 6000))) == 413
    assert await status(put(client, new_hash(), small, **{"X-Result-Digest": "no"})) == 422
    assert await status(put(client, new_hash(), small, **{"X-Result-Kind": "text"})) == 422
    assert await status(client.post("/v1/lookup", json={"hashes": ["NOT-HEX"]})) == 422
    assert await status(client.get("/v1/entries/not-a-hash")) == 422
    assert await status(put(client, new_hash(), small, **{"X-Result-Digest": new_hash()})) == 400
    await client.post(f"/v1/entries/{new_hash()}/pin")  # 404, nothing to pin
    pinned = [new_hash() for _ in range(4)]
    for n, task_hash in enumerate(pinned):
        assert (await put(client, task_hash, encode_pickle(bytes([n]) * 4500))).status_code == 201
        await client.post(f"/v1/entries/{task_hash}/pin")
    assert await status(put(client, new_hash(), encode_pickle(b"y" * 4500))) == 507
    assert (await client.get("/v1/stats")).json()["entries"] == 4


@pytest.mark.parametrize("url", ["redis://127.0.0.1:{port}/0",
                                 "redis+sentinel://127.0.0.1:{port}/result-cache",
                                 "redis+cluster://127.0.0.1:{port}"])
async def test_an_unreachable_redis_is_503_with_retry_after(make_app: MakeApp, url: str) -> None:
    client = await make_app(redis_url=url.format(port=free_port()))  # nothing listens there
    health = await client.get("/healthz")
    assert health.status_code == 503 and "unreachable" in health.json()["detail"]
    lookup = await client.post("/v1/lookup", json={"hashes": [new_hash()]})
    assert lookup.status_code == 503 and "Redis" in lookup.json()["detail"]
    packed = await client.post("/v1/lookup/packed", content=new_hash().encode(),
                               headers={"Content-Type": "application/octet-stream"})
    assert packed.status_code == 503
    for answer in (health, lookup, packed):
        assert answer.headers["Retry-After"] == "1"  # the server reconnects by itself


async def test_tokens_are_checked_before_anything_else(make_app: MakeApp) -> None:
    client = await make_app(tokens=f"read:r-{'r' * 32},write:w-{'w' * 32}")
    stranger = await client.post("/v1/lookup", json={"hashes": "not even a list"})
    assert stranger.status_code == 401 and "Bearer" in stranger.headers["WWW-Authenticate"]
    reader = {"Authorization": f"Bearer r-{'r' * 32}"}
    assert (await client.get("/v1/stats", headers=reader)).status_code == 200
    refused = await put(client, new_hash(), encode_pickle(1), **reader)
    assert refused.status_code == 403 and "write" in refused.json()["detail"]
    assert (await put(client, new_hash(), encode_pickle(1),
                      Authorization=f"Bearer w-{'w' * 32}")).status_code == 201
    assert (await client.get("/healthz")).status_code == 200


def test_every_service_and_storage_error_has_a_status() -> None:
    # ObjectNotFound never reaches the API: the service turns a missing object into a
    # dropped entry (EntryNotFound).
    bases = (service_errors.ServiceError, storage.errors.StorageError,
             storage.errors.ObjectNotFound)
    for module in (service_errors, storage.errors):
        for name in module.__all__:
            error = getattr(module, name)
            if isinstance(error, type) and error not in bases:
                assert any(issubclass(error, listed) for listed in STATUS), name
    assert status_of(storage.errors.DigestMismatch("a", "b")) == 400
    assert status_of(storage.errors.BodySizeMismatch(1, 2)) == 400
    assert status_of(service_errors.NoRoom("full")) == 507
    assert status_of(RuntimeError("a bug")) == 500


async def test_the_serve_command_freezes_the_started_process_and_an_embedded_app_does_not(
        redis_url: str, tmp_path) -> None:
    # `dask-cache serve` owns its process: once started, what exists lives as long as the
    # server, and full collections need not walk it again. An app inside another program
    # (these tests, a user's process) leaves that program's collector alone.
    import gc
    import uuid

    from cache_server.api.app import create_app
    from cache_server.settings import Settings

    assert gc.get_freeze_count() == 0
    for freeze in (False, True):
        app = create_app(Settings(redis_url=redis_url, redis_prefix=f"t{uuid.uuid4().hex}:",
                                  data_dir=tmp_path / f"app-{freeze}"), freeze_gc=freeze)
        try:
            async with app.router.lifespan_context(app):
                assert (gc.get_freeze_count() > 0) is freeze
        finally:
            gc.unfreeze()
