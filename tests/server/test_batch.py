"""``POST /v1/objects/batch``: many small objects in one request, one group commit
(docs/protocol.md, "Batched stores"), in process and against the session's server; the
kill -9 campaign over batches is in tests/reliability/test_faults.py, the write scope in
tests/reliability/test_auth.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest

from client_lib.wire.bounds import MAX_BATCH_OBJECT_BYTES
from tests.server.wire import Encoded, batch_body, encode_array, encode_pickle, new_hash

MakeApp = Callable[..., Any]  # the make_app fixture


async def post(client: httpx.AsyncClient, body: bytes) -> httpx.Response:
    return await client.post("/v1/objects/batch", content=body,
                             headers={"Content-Type": "application/x-result-batch"})


@pytest.mark.anyio
async def test_a_batch_is_stored_and_each_item_answered(make_app: MakeApp) -> None:
    client = await make_app()
    values = [encode_array(np.arange(i + 1, dtype="<f8")) for i in range(5)]
    values.append(encode_pickle({"a": 1}))
    hashes = [new_hash() for _ in values]
    wrong = Encoded("pickle", b"not what the digest says")
    wrong.digest = values[0].digest
    repeated = hashes[1]
    items = [*zip(hashes, values, strict=True), (new_hash(), wrong), (repeated, values[1])]
    answer = await post(client, batch_body(items))
    assert answer.status_code == 200, answer.text
    statuses = [r["status"] for r in answer.json()["results"]]
    assert statuses == [201] * 6 + [400, 200]
    assert [r["hash"] for r in answer.json()["results"]] == [h for h, _ in items]
    for task_hash, encoded in zip(hashes, values, strict=True):
        got = await client.get(f"/v1/objects/{task_hash}")
        assert got.status_code == 200 and got.content == encoded.body
    assert (await client.get(f"/v1/objects/{items[6][0]}")).status_code == 404
    again = await post(client, batch_body(items[:2]))
    assert [r["status"] for r in again.json()["results"]] == [200, 200]
    stats = (await client.get("/v1/stats")).json()
    assert stats["stores"] == 6 and stats["entries"] == 6


@pytest.mark.anyio
async def test_a_batch_stores_arrays_of_several_mebibytes_as_zarr(make_app: MakeApp) -> None:
    # Results of 1-16 MiB share batches (a PUT each cost the server ~3 ms and an fsync):
    # they must land in the array store as a PUT puts them, and read back whole.
    client = await make_app()
    arrays = [np.arange(n, dtype="<f8") for n in (2**18, 5 * 2**17 + 3, 7)]
    items = [(new_hash(), encode_array(a)) for a in arrays]
    answer = await post(client, batch_body(items))
    assert [r["status"] for r in answer.json()["results"]] == [201] * 3
    for (task_hash, encoded), array in zip(items, arrays, strict=True):
        got = await client.get(f"/v1/objects/{task_hash}")
        assert got.status_code == 200 and got.content == encoded.body
        manifest = (await client.get(f"/v1/entries/{task_hash}")).json()
        assert manifest["storage"] == ("zarr" if array.nbytes >= 2**20 else "blob")


@pytest.mark.anyio
async def test_a_batch_larger_than_the_cache_keeps_what_fits(make_app: MakeApp) -> None:
    # Refusing the whole batch stored nothing where PUTs one by one would have stored most.
    client = await make_app(max_bytes=5 * 2**20)
    arrays = [np.full(2**18, i, dtype="<f8") for i in range(3)]  # 2 MiB each
    items = [(new_hash(), encode_array(a)) for a in arrays]
    items.insert(1, (new_hash(), encode_pickle("small")))
    answer = await post(client, batch_body(items))
    assert [r["status"] for r in answer.json()["results"]] == [201, 201, 201, 507]
    stats = (await client.get("/v1/stats")).json()
    assert stats["entries"] == 3 and stats["stored_bytes"] <= 5 * 2**20
    assert (await client.get(f"/v1/objects/{items[3][0]}")).status_code == 404
    assert (await client.get(f"/v1/objects/{items[2][0]}")).content == items[2][1].body


@pytest.mark.anyio
async def test_equal_values_share_one_object(make_app: MakeApp) -> None:
    client = await make_app()
    value = encode_pickle("same")
    first, second = new_hash(), new_hash()
    answer = await post(client, batch_body([(first, value), (second, value)]))
    assert [r["status"] for r in answer.json()["results"]] == [201, 201]
    stats = (await client.get("/v1/stats")).json()
    assert stats["stored_bytes"] == len(value.body) and stats["bytes"] == 2 * len(value.body)
    third = new_hash()  # the object exists already: only its sidecar gains the task
    answer = await post(client, batch_body([(third, value)]))
    assert answer.json()["results"][0]["status"] == 201
    assert (await client.get(f"/v1/objects/{third}")).content == value.body


@pytest.mark.anyio
async def test_a_batch_ends_the_leases_of_what_it_stored(make_app: MakeApp) -> None:
    client = await make_app()
    task_hash = new_hash()
    leased = await client.post("/v1/leases", json={"holder": "run-a", "ttl": 60,
                                                   "hashes": [task_hash]})
    assert leased.json()["granted"] == [task_hash]
    await post(client, batch_body([(task_hash, encode_pickle(1))]))
    state = (await client.get(f"/v1/leases/{task_hash}")).json()
    assert state["leased"] is False and state["stored"] is True


def sync_post(client: httpx.Client, body: bytes) -> httpx.Response:
    return client.post("/v1/objects/batch", content=body,
                       headers={"Content-Type": "application/x-result-batch"})


def entries(client: httpx.Client) -> int:
    return client.get("/v1/stats").json()["entries"]


# Refusals against the real server (the session's uvicorn process).
@pytest.mark.parametrize(("mangle", "message"), [
    (lambda body: body[:-1], "ends inside an object"),
    (lambda body: body[:2], "ends inside an item's header length"),
    (lambda body: (10**6).to_bytes(4, "big") + body[4:], "header longer than"),
    (lambda body: (5).to_bytes(4, "big") + b"{oops" + body[9:], "unreadable batch item"),
])
def test_malformed_batches_store_nothing(client: httpx.Client, mangle, message) -> None:
    before = entries(client)
    body = batch_body([(new_hash(), encode_pickle(1)), (new_hash(), encode_pickle(2))])
    answer = sync_post(client, mangle(body))
    assert answer.status_code == 422 and message in answer.json()["detail"]
    assert entries(client) == before


def test_batch_bounds(client: httpx.Client) -> None:
    before = entries(client)
    big = Encoded("pickle", b"x" * (MAX_BATCH_OBJECT_BYTES + 1))
    answer = sync_post(client, batch_body([(new_hash(), big)]))
    assert answer.status_code == 422 and "PUT larger ones" in answer.json()["detail"]
    many = [(new_hash(), encode_pickle(i)) for i in range(1001)]
    answer = sync_post(client, batch_body(many))
    assert answer.status_code == 422 and "more than 1000" in answer.json()["detail"]
    bad_hash = batch_body([("X" * 32, encode_pickle(1))])
    assert sync_post(client, bad_hash).status_code == 422
    huge = sync_post(client, b"\0" * (64 * 2**20 + 1))
    assert huge.status_code == 413
    assert entries(client) == before


@pytest.mark.anyio
async def test_a_batch_indexes_each_entry_as_single_stores_do(make_app: MakeApp) -> None:
    # The batch's index writes go one command per key for all its entries (labels, expiries,
    # shared objects, the byte counts): the entries must come out as PUTs index them.
    by_batch, by_put = await make_app(), await make_app()
    shared = encode_pickle("shared")
    groups = [("left", None, [encode_pickle(1), shared, encode_array(np.arange(4.0))]),
              ("right", 600, [shared, encode_pickle(2)])]
    body, stored = b"", []
    for label, ttl, values in groups:
        items = [(new_hash(), v) for v in values]
        stored += [(h, v, label, ttl) for h, v in items]
        body += batch_body(items, label=label, overrides={"ttl": ttl} if ttl else None)
    answer = await post(by_batch, body)
    assert [r["status"] for r in answer.json()["results"]] == [201] * 5
    for task_hash, encoded, label, ttl in stored:
        headers = encoded.headers(label)
        if ttl:
            headers["X-Result-TTL"] = str(ttl)
        put = await by_put.put(f"/v1/objects/{task_hash}", content=encoded.body,
                               headers=headers)
        assert put.status_code == 201, put.text

    async def described(client: httpx.AsyncClient) -> list[dict]:
        entries = [(await client.get(f"/v1/entries/{h}")).json() for h, *_ in stored]
        for entry in entries:
            assert entry.pop("created") <= entry.pop("last_access")
            if entry.get("expires"):
                entry["expires"] = round(entry["expires"] - time.time(), -1)
        return entries

    def counts(stats: dict) -> dict:
        return {k: stats[k] for k in ("entries", "stores", "bytes", "stored_bytes")}

    assert await described(by_batch) == await described(by_put)
    assert [e["expires"] for e in await described(by_batch)] == [None] * 3 + [600.0] * 2
    assert (counts((await by_batch.get("/v1/stats")).json())
            == counts((await by_put.get("/v1/stats")).json()))
    for label, _, values in groups:
        listed = [(await c.get("/v1/entries", params={"label": label})).json()
                  for c in (by_batch, by_put)]
        assert len(listed[0]["entries"]) == len(values)
        assert ({e["hash"] for e in listed[0]["entries"]}
                == {e["hash"] for e in listed[1]["entries"]})
