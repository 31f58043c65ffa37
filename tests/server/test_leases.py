"""``/v1/leases``, overwrite and expiry over HTTP, against the session's real server."""

from __future__ import annotations

import time
import uuid

import anyio
import httpx
import pytest

from tests.server.wire import encode_pickle, new_hash, put


def lease(client: httpx.Client, holder: str, *hashes: str, ttl: float = 60.0,
          route: str = "/v1/leases") -> httpx.Response:
    return client.post(route, json={"holder": holder, "ttl": ttl, "hashes": list(hashes)})


def test_a_lease_goes_to_one_holder_until_released(client):
    a, b, h = "run-" + uuid.uuid4().hex, "run-" + uuid.uuid4().hex, new_hash()
    assert lease(client, a, h).json() == {"granted": [h], "stored": [], "held": []}
    assert lease(client, a, h).json()["granted"] == [h]  # its own: renewed, idempotent
    assert lease(client, b, h).json() == {"granted": [], "stored": [], "held": [h]}
    state = client.get(f"/v1/leases/{h}").json()
    assert state["leased"] and not state["stored"] and 0 < state["ttl"] <= 60
    assert client.post("/v1/leases/release",
                       json={"holder": b, "hashes": [h]}).json() == {"released": 0}
    assert client.post("/v1/leases/release",
                       json={"holder": a, "hashes": [h]}).json() == {"released": 1}
    assert lease(client, b, h).json()["granted"] == [h]


def test_overlapping_sets_in_any_order_split_without_blocking(client):
    a, b = "run-" + uuid.uuid4().hex, "run-" + uuid.uuid4().hex
    hashes = [new_hash() for _ in range(6)]
    first = lease(client, a, *hashes[:4]).json()
    second = lease(client, b, *reversed(hashes[2:])).json()
    assert first["granted"] == hashes[:4]
    assert sorted(second["held"]) == sorted(hashes[2:4])
    assert sorted(second["granted"]) == sorted(hashes[4:])


def test_a_large_lease_request_answers_every_hash_in_order(client):
    # Membership is read in chunks of 4000 inside the script: stored and held hashes on
    # both sides of a chunk boundary keep their places.
    a, b = "run-" + uuid.uuid4().hex, "run-" + uuid.uuid4().hex
    hashes = [new_hash() for _ in range(9000)]
    stored, held = [hashes[3999], hashes[4000], hashes[8999]], [hashes[0], hashes[4001]]
    for h in stored:
        assert put(client, h, encode_pickle(h)).status_code == 201
    assert lease(client, b, *held).json()["granted"] == held
    answer = lease(client, a, *hashes).json()
    assert answer["stored"] == stored and answer["held"] == held
    assert answer["granted"] == [h for h in hashes if h not in stored + held]


def lease_packed(client: httpx.Client, holder: str, *hashes: str, ttl: object = 60.0,
                 content: bytes | None = None) -> httpx.Response:
    return client.post("/v1/leases/packed", params={"holder": holder, "ttl": ttl},
                       content="".join(hashes).encode() if content is None else content,
                       headers={"Content-Type": "application/octet-stream"})  # as the client



def test_the_packed_lease_answers_one_byte_per_hash_in_order(client):
    # The same chunk boundaries as above, through the packed route: 0 granted, 1 stored,
    # 2 held by another; the leases it grants are the JSON route's leases.
    a, b = "run-" + uuid.uuid4().hex, "run-" + uuid.uuid4().hex
    hashes = [new_hash() for _ in range(9000)]
    stored, held = [hashes[1999], hashes[2000], hashes[8999]], [hashes[0], hashes[4001]]
    for h in stored:
        assert put(client, h, encode_pickle(h)).status_code == 201
    assert lease(client, b, *held).json()["granted"] == held
    response = lease_packed(client, a, *hashes, ttl=30)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/octet-stream"
    expected = bytes(1 if h in stored else 2 if h in held else 0 for h in hashes)
    assert response.content == expected
    state = client.get(f"/v1/leases/{hashes[1]}").json()
    assert state["leased"] and 0 < state["ttl"] <= 30
    assert lease(client, b, hashes[1]).json()["held"] == [hashes[1]]  # a's lease now
    assert lease_packed(client, a, hashes[1]).content == b"\x00"  # its own: renewed
    assert lease_packed(client, a).content == b""
    released = client.post("/v1/leases/release", json={"holder": a, "hashes": hashes})
    assert released.json()["released"] == len(hashes) - len(stored) - len(held)


@pytest.mark.slow
def test_leases_on_a_redis_cluster_answer_every_hash_in_order(fresh_server,
                                                             redis_cluster_url):
    # Each shard runs the script on its part (packed, as one argument): the answers come
    # back in request order through both routes.
    server = fresh_server(redis=redis_cluster_url)
    a, b = "run-" + uuid.uuid4().hex, "run-" + uuid.uuid4().hex
    hashes = [new_hash() for _ in range(3000)]
    stored, held = hashes[5:8], [hashes[0], hashes[2999]]
    with httpx.Client(base_url=server.url) as client:
        for h in stored:
            assert put(client, h, encode_pickle(h)).status_code == 201
        assert lease(client, b, *held).json()["granted"] == held
        expected = bytes(1 if h in stored else 2 if h in held else 0 for h in hashes)
        assert lease_packed(client, a, *hashes).content == expected
        answer = lease(client, b, *hashes[:100]).json()  # a's leases now
        assert answer["stored"] == stored and answer["granted"] == [hashes[0]]
        assert answer["held"] == [h for h in hashes[1:100] if h not in stored]


def test_the_packed_lease_is_bounded(client):
    h = new_hash()
    for holder, ttl, content in (("x", 0.5, None), ("x", 7200, None), ("x", "nan", None),
                                 ("x", "soon", None), ("has space", 60, None),
                                 ("x" * 65, 60, None), ("", 60, None),
                                 ("x", 60, h.encode()[:31]), ("x", 60, h.upper().encode())):
        response = lease_packed(client, holder, h, ttl=ttl, content=content)
        assert response.status_code == 422, (holder, ttl, content)
    assert not client.get(f"/v1/leases/{h}").json()["leased"]  # nothing was taken


def test_a_store_ends_the_lease_and_waiters_see_it_stored(client):
    holder, h = "run-" + uuid.uuid4().hex, new_hash()
    lease(client, holder, h)
    assert put(client, h, encode_pickle(1)).status_code == 201
    state = client.get(f"/v1/leases/{h}").json()
    assert state["stored"] and not state["leased"]
    assert lease(client, "run-other", h).json()["stored"] == [h]


@pytest.mark.slow
def test_an_unrenewed_lease_expires_and_renewal_keeps_it(client):
    holder, h, k = "run-" + uuid.uuid4().hex, new_hash(), new_hash()
    lease(client, holder, h, k, ttl=1)
    time.sleep(0.6)
    renewed = lease(client, holder, k, ttl=1, route="/v1/leases/renew").json()
    assert renewed == {"renewed": [k], "lost": []}
    time.sleep(0.6)
    assert not client.get(f"/v1/leases/{h}").json()["leased"]  # expired
    assert client.get(f"/v1/leases/{k}").json()["leased"]  # renewed in time
    estimate = client.post("/v1/leases/renew", json={
        "holder": holder, "ttl": 5, "hashes": [k], "estimates": {k: 12.5}})
    assert estimate.json()["renewed"] == [k]
    assert client.get(f"/v1/leases/{k}").json()["estimate"] == 12.5


def test_leases_are_bounded(client):
    h = new_hash()
    for body in ({"holder": "x", "ttl": 0.5, "hashes": [h]},
                 {"holder": "x", "ttl": 7200, "hashes": [h]},
                 {"holder": "has space", "hashes": [h]},
                 {"holder": "x" * 65, "hashes": [h]},
                 {"holder": "x", "hashes": ["nothex"]}):
        assert client.post("/v1/leases", json=body).status_code == 422, body
    bad_estimate = {"holder": "x", "hashes": [h], "estimates": {h: float("1e308")}}
    assert client.post("/v1/leases/renew", json=bad_estimate).status_code == 422


def test_overwrite_replaces_the_entry_and_drops_the_old_object(client, stats):
    h = new_hash()
    assert put(client, h, encode_pickle("old")).status_code == 201
    before = stats()
    assert put(client, h, encode_pickle("new!")).status_code == 200  # plain PUT: a no-op
    new = encode_pickle("new!")
    response = client.put(f"/v1/objects/{h}", params={"overwrite": "true"},
                          content=new.body, headers=new.headers())
    assert response.status_code == 201 and response.json()["digest"] == new.digest
    body = client.get(f"/v1/objects/{h}")
    assert body.headers["x-result-digest"] == new.digest
    after = stats()
    assert after["overwrites"] == before["overwrites"] + 1
    assert after["entries"] == before["entries"]
    assert after["stored_bytes"] - before["stored_bytes"] == len(new.body) - len(
        encode_pickle("old").body)  # the old object is gone


@pytest.mark.slow
def test_an_expired_entry_is_a_miss_and_is_removed(client, stats):
    h = new_hash()
    assert put(client, h, encode_pickle(5), overrides={"ttl": "1"}).status_code == 201
    assert client.post("/v1/lookup", json={"hashes": [h]}).json()["found"] == [h]
    assert client.get(f"/v1/entries/{h}").json()["expires"] > time.time()
    time.sleep(1.2)
    assert client.post("/v1/lookup", json={"hashes": [h]}).json()["found"] == []
    flags = client.post("/v1/lookup/packed", content=h.encode(),
                        headers={"Content-Type": "application/octet-stream"}).content
    assert flags == b"\x00"
    before = stats()["expired"]
    assert client.get(f"/v1/objects/{h}").status_code == 404
    assert stats()["expired"] == before + 1
    for bad in ("0", "-1", "nan", "1e12"):
        response = put(client, new_hash(), encode_pickle(1), overrides={"ttl": bad})
        assert response.status_code == 422, bad


def overwrite(client: httpx.Client, task_hash: str, encoded) -> httpx.Response:
    return client.put(f"/v1/objects/{task_hash}", params={"overwrite": "true"},
                      content=encoded.body, headers=encoded.headers())


def test_overwrite_keeps_an_object_other_entries_still_use(client, cache_server):
    from storage import LocalStorage

    storage = LocalStorage(cache_server.data_dir)
    shared, other, new = encode_pickle(uuid.uuid4().hex), new_hash(), new_hash()
    assert put(client, other, shared).status_code == 201
    assert put(client, new, shared).status_code == 201  # same object, two entries
    replacement = encode_pickle(uuid.uuid4().hex)
    assert overwrite(client, new, replacement).status_code == 201
    assert storage.exists(shared.digest)  # still the other entry's
    assert set(storage.sidecar(shared.digest).tasks) == {other}
    assert set(storage.sidecar(replacement.digest).tasks) == {new}
    assert client.get(f"/v1/objects/{other}").headers["x-result-digest"] == shared.digest
    again = encode_pickle(uuid.uuid4().hex)
    assert overwrite(client, new, again).status_code == 201
    assert not storage.exists(replacement.digest)  # nothing else used it: removed
    assert overwrite(client, new, again).status_code == 201  # the same bytes again
    assert storage.exists(again.digest)
    assert set(storage.sidecar(again.digest).tasks) == {new}


@pytest.mark.slow
def test_overwrite_needs_a_write_token(fresh_server):
    server = fresh_server(tokens=f"read:r-{'r' * 32},write:w-{'w' * 32}")
    h, value = new_hash(), encode_pickle(1)
    with httpx.Client(base_url=server.url,
                      headers={"Authorization": f"Bearer r-{'r' * 32}"}) as reader:
        assert overwrite(reader, h, value).status_code == 403
        assert lease(reader, "run-x", h).status_code == 403
        assert reader.get(f"/v1/leases/{h}").status_code == 200
    with httpx.Client(base_url=server.url) as stranger:
        assert stranger.get(f"/v1/leases/{h}").status_code == 401


# -- the leases hash (docs/design/leases.md, "Leases"), in process ------------------


@pytest.mark.anyio
async def test_expired_leases_are_free_and_swept_under_the_maintenance_lease(make_cache):
    cache = make_cache()
    gone, kept = new_hash(), new_hash()
    assert (await cache.leases.acquire([gone], "run-a", 0.05))[0] == [gone]
    assert (await cache.leases.acquire([kept], "run-a", 60))[0] == [kept]
    await anyio.sleep(0.1)
    state = await cache.leases.state(gone)
    assert not state.leased and state.ttl is None  # expired, even before the sweep
    async with cache.maintenance.hold(wait=0):  # another replica's eviction round
        assert await cache.sweep_leases() == 0
    assert len(await cache.leases.store.recorded()) == 2
    assert await cache.sweep_leases() == 1
    assert await cache.leases.store.recorded() == [kept]
    assert (await cache.sweep_leases()) == 0
    # the expired hash goes to anyone; the live one stays its holder's
    granted, stored, held = await cache.leases.acquire([gone, kept], "run-b", 60)
    assert (granted, stored, held) == ([gone], [], [kept])
    assert await cache.leases.release([gone, kept], "run-b") == 1


@pytest.mark.anyio
async def test_a_sweep_walks_a_hash_larger_than_its_page(make_cache):
    cache = make_cache()
    expired = [new_hash() for _ in range(2500)]
    live = [new_hash() for _ in range(1500)]
    await cache.leases.acquire(expired, "run-a", 0.05)
    await cache.leases.acquire(live, "run-b", 60)
    await anyio.sleep(0.1)
    assert await cache.sweep_leases() == len(expired)
    assert sorted(await cache.leases.store.recorded()) == sorted(live)


@pytest.mark.anyio
async def test_repeated_hashes_are_answered_once_and_estimates_survive_a_re_lease(make_cache):
    cache = make_cache()
    h, k = new_hash(), new_hash()
    assert await cache.leases.acquire([h, k, h, h], "run-a", 60) == ([h, k], [], [])
    assert await cache.leases.renew([k, k], "run-a", 60, {k: 3.5}) == ([k], [])
    assert (await cache.leases.acquire([k], "run-a", 60))[0] == [k]  # renewed by re-leasing
    state = await cache.leases.state(k)
    assert state.leased and state.estimate == 3.5 and 59 < state.ttl <= 60
    assert await cache.leases.renew([h], "run-b", 60, {}) == ([], [h])  # not b's
    assert await cache.leases.release([h, h, k], "run-a") == 2
    assert not (await cache.leases.state(h)).leased
