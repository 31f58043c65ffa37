"""Ed25519 signatures (issue 29): a writer signs with its private key, readers hold only
public keys. With HMAC every reader could also sign; here a reader cannot, so a reader of the
team cache (or anyone with a write token and a key of his own) forges nothing a trusting
reader loads, and a reader never stores (nobody would load what it stored)."""

from __future__ import annotations

import pickle
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import dask
import httpx
import numpy as np
import pytest

from cache_server.launch import RunningServer
from client_lib import cached_compute, last_report, task_hashes
from client_lib.core.public_keys import Ed25519Keys, new_keypair
from client_lib.core.signing import SigningKey
from client_lib.wire.body_hash import body_root
from tests.reliability._xxh3_forgery import forge
from tests.server.wire import Encoded, put
from tests.stress.poisoned import Payload


def pk_summary(n: int) -> dict:
    return {"n": n, "squares": [i * i for i in range(600)]}  # a pickle of a few KiB


def pk_scaled(n: int) -> np.ndarray:
    return np.arange(n, dtype="float64") * 3.0


@contextmanager
def keys(signing: str | None = None, *trusted: str, **more: object) -> Iterator[None]:
    with dask.config.set(
        {
            "result-cache.signing-key": signing,
            "result-cache.trusted-keys": ",".join(trusted) or None,
            **{f"result-cache.{k.replace('_', '-')}": v for k, v in more.items()},
        }
    ):
        yield


def entry(server: RunningServer, task_hash: str) -> httpx.Response:
    return httpx.get(f"{server.url}/v1/entries/{task_hash}")


def replace(server: RunningServer, task_hash: str, body: Encoded, signature: str) -> None:
    """What a forger with a write token does: DELETE + PUT, valid digest, his signature."""
    with httpx.Client(base_url=server.url) as client:
        assert client.delete(f"/v1/entries/{task_hash}").status_code == 204
        assert put(client, task_hash, body, overrides={"signature": signature}).status_code == 201


def hash_of(value: object, ns: str) -> str:
    (task_hash,) = task_hashes(value, namespace=ns).values()
    return task_hash


@pytest.mark.slow
def test_a_writer_signs_and_only_readers_trusting_its_key_load(cache_server):
    private, public = new_keypair()
    ns = uuid.uuid4().hex
    values = [dask.delayed(pk_summary, pure=True)(7), dask.delayed(pk_scaled, pure=True)(999)]
    expected = (pk_summary(7), pk_scaled(999))

    with keys(private):
        assert (
            cached_compute(
                *values, cache=cache_server.url, namespace=ns, policy="all", scheduler="threads"
            )[0]
            == expected[0]
        )
        assert last_report().stored == 2 and "stores nothing" not in str(last_report())
        hashes = [hash_of(v, ns) for v in values]
        # the writer trusts its own key
        cached_compute(*values, cache=cache_server.url, namespace=ns, scheduler="threads")
        assert last_report().loaded == 2 and last_report().untrusted == 0
    (kid,) = {entry(cache_server, h).json()["signature"].split(".")[1] for h in hashes}
    assert [entry(cache_server, h).json()["signature"][:3] for h in hashes] == ["e1."] * 2

    # Hashes are public: a reader computes the same ones, unlike without keys or with HMAC.
    with keys(None, public):
        assert [hash_of(v, ns) for v in values] == hashes
    with keys(None):
        assert set(hashes).isdisjoint(hash_of(v, ns) for v in values)
    with keys(secrets.token_hex(32)):
        assert set(hashes).isdisjoint(hash_of(v, ns) for v in values)

    for direct in ("auto", "never"):  # read in place, and over HTTP
        with keys(None, new_keypair()[1], public, direct_read=direct):
            got = cached_compute(*values, cache=cache_server.url, namespace=ns, scheduler="threads")
        assert got[0] == expected[0]
        np.testing.assert_array_equal(got[1], expected[1])
        report = last_report()
        assert report.loaded == 2 and report.untrusted == 0, report

    # A reader that trusts another key recomputes both and loads nothing.
    with keys(None, new_keypair()[1]):  # (warned once per cache and process: not checked)
        got = cached_compute(*values, cache=cache_server.url, namespace=ns, scheduler="threads")
    assert got[0] == expected[0] and last_report().loaded == 0
    assert last_report().untrusted == 2 and "untrusted 2" in str(last_report())
    assert {entry(cache_server, h).json()["signature"].split(".")[1] for h in hashes} == {kid}

    # A process with only trusted keys never stores: it could not sign.
    fresh = dask.delayed(pk_summary, pure=True)(8)
    with keys(None, public):
        assert cached_compute(
            fresh, cache=cache_server.url, namespace=ns, policy="all", scheduler="threads"
        ) == (pk_summary(8),)
        report = last_report()
        fresh_hash = hash_of(fresh, ns)
    assert report.computed >= 1 and report.stored == 0 and report.leased == 0
    assert "stores nothing" in str(report) and "trusted-keys" in report.not_storing
    assert entry(cache_server, fresh_hash).status_code == 404


@pytest.mark.slow
def test_open_cached_checks_chunks_against_a_trusted_signature(cache_server):
    """A Zarr array reopened lazily: its signature is checked at open, each chunk it reads
    against the BLAKE3 list whose root the writer signed."""
    import dask.array as da

    from client_lib import CacheEntryUntrusted, open_cached

    private, public = new_keypair()
    ns = uuid.uuid4().hex
    array = da.arange(400_000, chunks=100_000) * 3.0  # ~3 MiB: one Zarr array
    with keys(private):
        (expected,) = cached_compute(
            array, cache=cache_server.url, namespace=ns, policy="all", scheduler="threads"
        )
    with keys(None, public):
        lazy = open_cached(array, cache=cache_server.url, namespace=ns)
        np.testing.assert_array_equal(lazy[1000:1010].compute(), expected[1000:1010])
        np.testing.assert_array_equal(lazy.compute(), expected)
    with keys(None, new_keypair()[1]), pytest.raises(CacheEntryUntrusted):
        open_cached(array, cache=cache_server.url, namespace=ns)


@pytest.mark.slow
def test_forged_entries_are_refused_by_a_trusting_reader(cache_server, tmp_path):
    """Three forgers who can write to the cache: one with an HMAC team secret (a valid v2
    signature), one who re-signs his payload with an Ed25519 key of his own, one who
    replays the writer's genuine signature over a body forged to the same xxh3 digest."""
    private, public = new_keypair()
    ns = uuid.uuid4().hex
    values = [dask.delayed(pk_summary, pure=True)(n) for n in (1, 2, 3)]
    with keys(private):
        cached_compute(
            *values, cache=cache_server.url, namespace=ns, policy="all", scheduler="threads"
        )
        hmac_hash, resigned_hash, replayed_hash = (hash_of(v, ns) for v in values)
    marker = tmp_path / "ran"

    def poison(n: int) -> Encoded:
        return Encoded("pickle", pickle.dumps(Payload(marker, {"n": -n})))

    def signed_by(signer: SigningKey | Ed25519Keys, task_hash: str, body: Encoded) -> str:
        return signer.sign(
            task_hash, body.kind, "", "", body.digest, body_root("pickle", "", "", body.body)
        )

    replace(
        cache_server,
        hmac_hash,
        poison(1),
        signed_by(SigningKey(secrets.token_hex(32)), hmac_hash, poison(1)),
    )
    replace(
        cache_server,
        resigned_hash,
        poison(2),
        signed_by(Ed25519Keys(new_keypair()[0]), resigned_hash, poison(2)),
    )
    genuine = httpx.get(f"{cache_server.url}/v1/objects/{replayed_hash}")
    forged = forge(b"pickle\n\n\n", genuine.content, pickle.dumps(Payload(marker, {"n": -3})))
    assert Encoded("pickle", forged).digest == genuine.headers["x-result-digest"]
    replace(
        cache_server,
        replayed_hash,
        Encoded("pickle", forged),
        genuine.headers["x-result-signature"],
    )

    for who in (keys(None, public), keys(private)):  # a reader, and the writer itself
        with who:
            got = cached_compute(*values, cache=cache_server.url, namespace=ns, scheduler="threads")
        assert got == tuple(pk_summary(n) for n in (1, 2, 3))
        assert not marker.exists()  # no forger's pickle ran
        assert last_report().untrusted == 3 and last_report().loaded == 0


@pytest.mark.slow
def test_workers_sign_and_check_with_the_keys_they_were_sent(cache_server):
    """Workers that have no keys of their own: the writer's private key travels with the
    tasks (pickled, as the HMAC's derived keys do) and signs there; a reader's trusted keys
    check there; a reader's workers store nothing."""
    from distributed import Client, LocalCluster

    private, public = new_keypair()
    ns = uuid.uuid4().hex
    value = dask.delayed(pk_scaled, pure=True)(3 * 2**17)  # 3 MiB: stored by the worker
    with keys(None):
        cluster = LocalCluster(
            n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0"
        )
    with cluster, Client(cluster) as client:
        with keys(private):
            cached_compute(
                value, cache=cache_server.url, namespace=ns, policy="all", scheduler=client
            )
            task_hash = hash_of(value, ns)
        assert entry(cache_server, task_hash).json()["signature"].startswith("e1.")
        with keys(None, public):
            (got,) = cached_compute(value, cache=cache_server.url, namespace=ns, scheduler=client)
            np.testing.assert_array_equal(got, pk_scaled(3 * 2**17))
            assert last_report().loaded == 1 and last_report().untrusted == 0
            other = dask.delayed(pk_scaled, pure=True)(5)
            cached_compute(
                other, cache=cache_server.url, namespace=ns, policy="all", scheduler=client
            )
            assert entry(cache_server, hash_of(other, ns)).status_code == 404
        with keys(None, new_keypair()[1]):
            cached_compute(value, cache=cache_server.url, namespace=ns, scheduler=client)
            assert last_report().loaded == 0 and last_report().untrusted == 1


def test_keygen_prints_an_ed25519_pair_that_works() -> None:
    printed = subprocess.run(
        [sys.executable, "-m", "cache_server", "keygen", "--ed25519"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    lines = printed.splitlines()
    assert [line.split(": ")[0] for line in lines] == ["signing-key", "trusted-key"]
    private, public = (line.split(": ", 1)[1] for line in lines)
    assert private.startswith("ed25519:") and public.startswith("ed25519:")
    fields = ("ab" * 16, "pickle", "", "", "cd" * 16)
    signature = Ed25519Keys(private).sign(*fields, "ee" * 32)
    assert Ed25519Keys(None, [public]).verify(signature, *fields) == "ee" * 32
    assert private not in repr(Ed25519Keys(private))


@pytest.mark.slow
def test_a_reader_forges_under_hmac_and_not_under_ed25519(tmp_path):
    """The campaign (``python -m tests.stress.trusted_keys``, RELIABILITY.md) at small size:
    an HMAC reader holds the secret, so his payloads run in the writer's process; an Ed25519
    reader's four kinds of forgery never load, and he stores nothing."""
    from tests.stress.trusted_keys import run

    found = run(tmp_path, entries=4)
    assert found["hmac_reader"]["payloads_run"] == 4 == found["hmac_reader"]["reader_stored"]
    ed25519 = found["ed25519_reader"]
    assert (ed25519["payloads_run"], ed25519["wrong_values"], ed25519["loaded"]) == (0, 0, 0)
    assert ed25519["untrusted_reported"] >= 1 and ed25519["reader_stored"] == 0
    assert "cannot sign" in ed25519["reader_says"]
