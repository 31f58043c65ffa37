"""Signed results (issue 11, item 1): the attack of a cache writer on other users, as a test.

The attacker can write to the cache (no tokens, or a write token) but does not know the
team's signing key. He finds the victim's entry (by listing ``/v1/entries``, or by computing
its hash offline with ``task_hashes``), deletes it and stores in its place a pickle whose
unpickling creates a marker file, with a valid content digest. With a signing key the
victim never unpickles it (no marker, in the user's process or on a ``LocalCluster``
worker), recomputes the right value, reports ``untrusted`` and leaves the entry alone.
Without a key the attack works: that is the documented risk, and a test shows it.
"""

from __future__ import annotations

import pickle
import secrets
import subprocess
import sys
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import dask
import httpx
import numpy as np
import pytest

from cache_server.launch import RunningServer, start_server
from client_lib import cached_compute, last_report, task_hashes
from tests.reliability._xxh3_forgery import forge
from tests.server.wire import Encoded, encode_array, put
from tests.stress.poisoned import Payload


def summarise(n: int) -> dict:
    return {"n": n, "squares": [i * i for i in range(n)]}


def scaled(n: int) -> np.ndarray:
    return np.arange(n, dtype="float64") * 2.0


def listed(server: RunningServer, label: str = "summarise") -> list[dict]:
    """What anyone who can read the cache sees: its entries, here those of one label."""
    return httpx.get(f"{server.url}/v1/entries", params={"label": label}).json()["entries"]


def the_entry(server: RunningServer, label: str = "summarise") -> dict:
    (entry,) = listed(server, label)
    return entry


def replace_entry(server: RunningServer, task_hash: str, poison: Encoded,
                  signature: str | None = None) -> None:
    """What the attacker does: DELETE + PUT, with a correct digest for his own bytes."""
    with httpx.Client(base_url=server.url) as client:
        assert client.delete(f"/v1/entries/{task_hash}").status_code == 204
        extra = {"signature": signature} if signature else None
        assert put(client, task_hash, poison, overrides=extra).status_code == 201


def stats(server: RunningServer) -> dict:
    return httpx.get(f"{server.url}/v1/stats").json()


@pytest.fixture
def key() -> Iterator[str]:
    key = secrets.token_hex(32)
    with dask.config.set({"result-cache.signing-key": key}):
        yield key


def poison_for(marker: Path, value: object) -> Encoded:
    return Encoded("pickle", pickle.dumps(Payload(marker, value)))


def victim_stores_then_attacker_replaces(server: RunningServer, marker: Path,
                                         scheduler: object = "threads") -> tuple[str, dict]:
    """The victim computes and stores ``summarise(7)``; the attacker finds the entry in the
    listing and replaces it by a payload. Returns (namespace, the replaced entry)."""
    ns = uuid.uuid4().hex
    (first,) = cached_compute(dask.delayed(summarise, pure=True)(7), cache=server.url,
                              namespace=ns, policy="all", scheduler=scheduler)
    assert first == summarise(7)
    entry = the_entry(server)
    replace_entry(server, entry["hash"], poison_for(marker, {"n": 666}))
    return ns, entry


# -- with a key: the payload never runs -------------------------------------------------------


@pytest.mark.slow
def test_a_replaced_entry_is_never_unpickled_with_a_key(fresh_server, key, tmp_path):
    server = fresh_server()
    marker = tmp_path / "ran"
    ns, entry = victim_stores_then_attacker_replaces(server, marker)
    value = dask.delayed(summarise, pure=True)(7)
    assert entry["hash"] in task_hashes(value, namespace=ns).values()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            (again,) = cached_compute(value, cache=server.url, namespace=ns, policy="all",
                                      scheduler="threads")
            assert again == summarise(7)  # recomputed, right value
            assert not marker.exists()  # the payload never ran
            report = last_report()
            assert report.untrusted == 1 and report.loaded == 0, report
            assert "untrusted" in str(report)
    # not deleted: the attacker's entry is still there (a miss, not a cleanup)
    still = httpx.get(f"{server.url}/v1/entries/{entry['hash']}")
    assert still.status_code == 200 and still.json()["digest"] != entry["digest"]
    assert stats(server)["untrusted"] == 2
    events = httpx.get(f"{server.url}/v1/events").json()["events"]
    assert [e["hash"] for e in events if e["kind"] == "untrusted"] == [entry["hash"]] * 2
    # One warning for both runs (printed once: a RuntimeWarning, not also a WARNING record)
    warned = [str(w.message) for w in caught if "signature" in str(w.message)]
    assert len(warned) == 1 and "result-cache.signing-key" in warned[0]


@pytest.mark.slow
def test_forged_and_replayed_signatures_are_refused(fresh_server, key, tmp_path):
    """A signature copied from another entry, or made up, does not bind the payload."""
    server = fresh_server()
    ns = uuid.uuid4().hex
    values = [dask.delayed(summarise, pure=True)(n) for n in (5, 6)]
    cached_compute(*values, cache=server.url, namespace=ns, policy="all", scheduler="threads")
    by_hash = {e["hash"]: e for e in listed(server)}
    a, b = (by_hash[h] for v in values for h in task_hashes(v, namespace=ns).values())
    assert a["signature"] and b["signature"] and a["signature"] != b["signature"]
    # B's entry now holds A's genuine bytes with A's genuine signature (a replay) ...
    a_body = httpx.get(f"{server.url}/v1/objects/{a['hash']}").content
    replace_entry(server, b["hash"], Encoded("pickle", a_body), signature=a["signature"])
    # ... and A's entry a payload with a made-up signature.
    marker = tmp_path / "ran"
    forged = f"v2.{secrets.token_hex(32)}.{secrets.token_hex(32)}"
    replace_entry(server, a["hash"], poison_for(marker, 666), signature=forged)
    assert cached_compute(*values, cache=server.url, namespace=ns,
                          scheduler="threads") == (summarise(5), summarise(6))
    assert not marker.exists()
    assert last_report().untrusted == 2 and last_report().loaded == 0


def long_summary(n: int) -> dict:
    return {"n": n, "squares": [i * i for i in range(600)]}  # a pickle of a few KiB


@pytest.mark.slow
def test_a_body_forged_to_the_same_content_digest_never_runs(fresh_server, key, tmp_path):
    """Issue 29, row 1: xxh3 is not cryptographic. A writer without the key builds a body
    that starts with his pickle and has the victim's exact content digest (a second
    preimage, tests/reliability/_xxh3_forgery.py), and stores it with the victim's own
    signature headers. The signature binds the body's BLAKE3 digest, so it never loads."""
    server = fresh_server()
    ns = uuid.uuid4().hex
    value = dask.delayed(long_summary, pure=True)(7)
    cached_compute(value, cache=server.url, namespace=ns, policy="all", scheduler="threads")
    entry = the_entry(server, "long_summary")
    genuine = httpx.get(f"{server.url}/v1/objects/{entry['hash']}")
    marker = tmp_path / "ran"
    forged = forge(b"pickle\n\n\n", genuine.content,
                   pickle.dumps(Payload(marker, {"n": 666})))
    assert Encoded("pickle", forged).digest == entry["digest"]  # the server cannot tell
    replace_entry(server, entry["hash"], Encoded("pickle", forged),
                  signature=genuine.headers["x-result-signature"])
    assert httpx.get(f"{server.url}/v1/entries/{entry['hash']}").json()["digest"] == \
        entry["digest"]
    (again,) = cached_compute(value, cache=server.url, namespace=ns, scheduler="threads")
    assert again == long_summary(7)  # recomputed
    assert not marker.exists()  # the forger's pickle never ran
    assert last_report().untrusted == 1 and last_report().loaded == 0
    assert stats(server)["untrusted"] == 1


@pytest.mark.slow
def test_arrays_are_bound_to_their_task(fresh_server, key):
    server = fresh_server()
    ns = uuid.uuid4().hex
    value = dask.delayed(scaled, pure=True)(50)
    cached_compute(value, cache=server.url, namespace=ns, policy="all", scheduler="threads")
    entry = the_entry(server, "scaled")
    assert entry["kind"] == "ndarray" and entry["signature"]
    replace_entry(server, entry["hash"], encode_array(np.full(50, 666.0)),
                  signature=entry["signature"])  # the genuine signature, other bytes
    (again,) = cached_compute(value, cache=server.url, namespace=ns, scheduler="threads")
    np.testing.assert_array_equal(again, scaled(50))
    assert last_report().untrusted == 1 and last_report().loaded == 0


def padded(n: int) -> dict:
    return {"n": n, "padding": b"p" * (3 * 2**20)}  # a 3 MiB pickle


def big(n: int) -> np.ndarray:
    return np.arange(n, dtype="float64")  # stored as Zarr from 1 MiB on


@pytest.mark.slow
def test_large_objects_are_checked_the_same_way(fresh_server, key, tmp_path):
    """Objects large enough to take other storage and transfer paths (Zarr arrays, large
    blobs): nothing is decoded before the signature is checked."""
    server = fresh_server()
    ns = uuid.uuid4().hex
    values = [dask.delayed(padded, pure=True)(1), dask.delayed(big, pure=True)(2**20)]
    cached_compute(*values, cache=server.url, namespace=ns, policy="all", scheduler="threads")
    pickled, array = the_entry(server, "padded"), the_entry(server, "big")
    assert array["storage"] == "zarr" and array["signature"]
    marker = tmp_path / "ran"
    poison = pickle.dumps((Payload(marker, 666), b"p" * (3 * 2**20)))
    replace_entry(server, pickled["hash"], Encoded("pickle", poison))
    replace_entry(server, array["hash"], encode_array(np.full(2**20, 666.0)),
                  signature=array["signature"])
    again = cached_compute(*values, cache=server.url, namespace=ns, scheduler="threads")
    assert not marker.exists()
    assert again[0] == padded(1)
    np.testing.assert_array_equal(again[1], big(2**20))
    assert last_report().untrusted == 2 and last_report().loaded == 0


@pytest.mark.slow
@pytest.mark.parametrize("how", ["http", "direct", "open_cached"])
def test_an_array_forged_to_the_same_content_digest_is_refused(fresh_server, key, how):
    """Row 1 for arrays (Zarr, 3 MiB): the forged bytes are refused over HTTP, when read in
    place, and by ``open_cached``, whose chunk digests storage computed from the forgery."""
    from client_lib import CacheEntryUntrusted, open_cached

    server = fresh_server()
    ns = uuid.uuid4().hex
    value = dask.delayed(big, pure=True)(3 * 2**17)
    cached_compute(value, cache=server.url, namespace=ns, policy="all", scheduler="threads")
    entry = the_entry(server, "big")
    genuine = httpx.get(f"{server.url}/v1/objects/{entry['hash']}")
    prefix = f"ndarray\n{entry['dtype']}\n[{3 * 2**17}]\n".encode()
    forged = forge(prefix, genuine.content, np.full(100, 666.0).tobytes())
    encoded = Encoded("ndarray", forged, entry["dtype"], f"[{3 * 2**17}]")
    assert encoded.digest == entry["digest"]
    replace_entry(server, entry["hash"], encoded,
                  signature=genuine.headers["x-result-signature"])
    if how == "open_cached":
        import dask.array as da

        lazy = da.from_delayed(value, shape=(3 * 2**17,), dtype="float64")
        with pytest.raises(CacheEntryUntrusted):
            open_cached(lazy, cache=server.url, namespace=ns).compute()
    else:
        mode = "auto" if how == "direct" else "never"
        with dask.config.set({"result-cache.direct-read": mode}):
            (again,) = cached_compute(value, cache=server.url, namespace=ns,
                                      scheduler="threads")
        np.testing.assert_array_equal(again, big(3 * 2**17))
        assert last_report().untrusted == 1 and last_report().loaded == 0
    assert stats(server)["untrusted"] >= 1


def test_hashes_cannot_be_computed_without_the_key(key):
    value = dask.delayed(summarise, pure=True)(9)
    keyed = set(task_hashes(value).values())
    with dask.config.set({"result-cache.signing-key": None}):
        plain = set(task_hashes(value).values())
    with dask.config.set({"result-cache.signing-key": secrets.token_hex(32)}):
        other = set(task_hashes(value).values())
    assert keyed.isdisjoint(plain) and keyed.isdisjoint(other) and plain.isdisjoint(other)
    # the namespace still separates projects under one key
    assert keyed.isdisjoint(task_hashes(value, namespace="another").values())


@pytest.mark.slow
def test_the_key_never_reaches_the_server(tmp_path, redis_url, key):
    with start_server(tmp_path / "server", redis_url=redis_url, log_level="debug",
                      redis_prefix=f"key-{uuid.uuid4().hex[:8]}:") as server:
        value = dask.delayed(summarise, pure=True)(4)
        ns = uuid.uuid4().hex
        for _ in range(2):
            cached_compute(value, cache=server.url, namespace=ns, policy="all",
                           scheduler="threads")
        assert last_report().loaded == 1
        log = server.log_path.read_text()
    # The access log is on (the load reads in place: it asked for the location; small
    # results are stored in batches: client_lib/execution/store_queue.py).
    assert "GET /v1/entries/" in log and "POST /v1/objects/batch" in log
    assert key not in log


@pytest.mark.slow
def test_a_replaced_entry_never_runs_on_a_cluster_worker(fresh_server, key, tmp_path):
    from distributed import Client, LocalCluster

    server = fresh_server()
    marker = tmp_path / "ran-on-worker"
    with dask.config.set({"result-cache.signing-key": None}):  # the worker has no key
        cluster = LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                               dashboard_address=":0")
    with cluster, Client(cluster) as client:
        ns, entry = victim_stores_then_attacker_replaces(server, marker, client)
        value = dask.delayed(summarise, pure=True)(7)
        (again,) = cached_compute(value, cache=server.url, namespace=ns, scheduler=client)
        assert again == summarise(7)
        assert not marker.exists()
        assert last_report().untrusted == 1 and last_report().loaded == 0
    assert stats(server)["untrusted"] == 1


def test_keygen_prints_a_new_random_key() -> None:
    keys = [subprocess.run([sys.executable, "-m", "cache_server", "keygen"], check=True,
                           capture_output=True, text=True, timeout=60).stdout.strip()
            for _ in range(2)]
    assert keys[0] != keys[1]
    for printed in keys:
        assert len(printed) == 64 and int(printed, 16) >= 0


# -- without a key: the documented risk ------------------------------------------------------


@pytest.mark.slow
def test_without_a_key_the_replaced_entry_runs(fresh_server, tmp_path):
    """The risk README.md and docs/protocol.md describe: whoever can write to the cache can
    run code in the process that loads a value. This is the reason for signing keys."""
    server = fresh_server()
    marker = tmp_path / "ran"
    ns, entry = victim_stores_then_attacker_replaces(server, marker)
    value = dask.delayed(summarise, pure=True)(7)
    # the attacker could as well have computed the hash: no secret goes into it
    assert entry["hash"] in task_hashes(value, namespace=ns).values()
    (loaded,) = cached_compute(value, cache=server.url, namespace=ns, scheduler="threads")
    assert marker.exists()  # the attacker's code ran in this process
    assert loaded == {"n": 666}  # and his value was returned
    assert last_report().loaded == 1 and last_report().untrusted == 0
