"""``result-cache.signing-key``: the signature format of docs/protocol.md (recomputed here
independently), where the key comes from in each process, and that it never shows."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import pickle
import subprocess
import sys

import blake3
import dask
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from client_lib import CacheClient
from client_lib.core.public_keys import Ed25519Keys, new_keypair
from client_lib.core.signing import SigningKey
from client_lib.plan.settings import resolve_cache
from client_lib.wire.body_hash import body_root

SECRET = "3f" * 32
OTHER = "a1" * 32
URL = "http://cache-server:8780"


def documented_signature(secret: str, task_hash: str, kind: str, dtype: str, shape: str,
                         digest: str, body: str) -> str:
    """docs/protocol.md, "Signed results", step by step."""
    k_sig = hmac.new(secret.encode(), b"dask-result-cache signature", hashlib.sha256).digest()
    message = (f"dask-result-cache signature v2\nhash={task_hash}\nkind={kind}\n"
               f"dtype={dtype}\nshape={shape}\ndigest={digest}\nbody={body}\n").encode()
    return f"v2.{body}." + hmac.new(k_sig, message, hashlib.sha256).hexdigest()


def documented_body_digest(body: bytes) -> str:
    """One piece (a pickle, or an array below 16 MiB): BLAKE3 over BLAKE3 of the body."""
    return blake3.blake3(b"dask-result-cache body v2\n"
                         + blake3.blake3(body).digest()).hexdigest()


def documented_keyed_hash(secret: str, digest: bytes) -> str:
    k_hash = hmac.new(secret.encode(), b"dask-result-cache task hash v2",
                      hashlib.sha256).digest()
    return hmac.new(k_hash, digest, hashlib.sha256).digest()[:16].hex()


def test_signatures_and_keyed_hashes_are_what_the_protocol_says():
    key = SigningKey(SECRET)
    body = documented_body_digest(b"the body")
    assert body == body_root("pickle", "", "", b"the body")
    fields = ("ab" * 16, "ndarray", "<f8", "[3,4]", "cd" * 16)
    assert key.sign(*fields, body) == documented_signature(SECRET, *fields, body)
    assert key.verify(documented_signature(SECRET, *fields, body), *fields) == body
    assert key.keyed_hash(b"\x01" * 16) == documented_keyed_hash(SECRET, b"\x01" * 16)


def test_a_signature_binds_every_field():
    key = SigningKey(SECRET)
    body = "ee" * 32
    fields = ["ab" * 16, "pickle", "", "", "cd" * 16]
    signature = key.sign(*fields, body)
    for i, other in enumerate(["ef" * 16, "ndarray", "<f8", "[1]", "00" * 16]):
        changed = list(fields)
        changed[i] = other
        assert key.verify(signature, *changed) is None, i
    assert SigningKey(OTHER).verify(signature, *fields) is None
    other_body = signature.replace(body, "ff" * 32)  # a body digest of the forger's bytes
    v1 = "v1." + signature.rpartition(".")[2]  # the old format, without a body digest
    for bad in (None, "", "v3." + signature[3:], signature[:-1], signature + "0", "v2.zz",
                other_body, v1):
        assert key.verify(bad, *fields) is None, bad


def test_weak_or_mangled_keys_are_refused():
    with pytest.raises(ValueError, match="keygen"):
        SigningKey("short")
    with dask.config.set({"result-cache.signing-key": 1234567890123456789012345678901234}), \
            pytest.raises(TypeError, match="number"):
        resolve_cache("http://127.0.0.1:1")
    keygen = subprocess.run([sys.executable, "-m", "cache_server", "keygen"],
                            capture_output=True, text=True, check=True, timeout=60)
    env = {**os.environ, "DASK_RESULT_CACHE__SIGNING_KEY": keygen.stdout.strip()}
    read_back = subprocess.run(
        [sys.executable, "-c", "import client_lib, dask; "
         "print(dask.config.get('result-cache.signing-key'))"],
        env=env, capture_output=True, text=True, check=True, timeout=60)
    assert read_back.stdout.strip() == keygen.stdout.strip()  # a string, unchanged


def on_worker(client: CacheClient, **worker_config: object) -> CacheClient:
    data = pickle.dumps(client)
    assert SECRET.encode() not in data and OTHER.encode() not in data  # never the secret
    with dask.config.set({f"result-cache.{k}": v for k, v in worker_config.items()}):
        return pickle.loads(data)


def test_the_senders_key_travels_to_the_workers():
    with dask.config.set({"result-cache.url": URL, "result-cache.signing-key": SECRET}):
        configured = resolve_cache()
        explicit = resolve_cache(URL)
    assert configured is not None and explicit is not None
    for client in (configured, explicit):
        assert client.signing_key == SigningKey(SECRET)
        assert SECRET not in repr(client) and SECRET not in repr(client.signing_key)
        for worker_key in (None, OTHER):  # the sender's key wins: it hashed the tasks
            worker = on_worker(client, url=URL, **{"signing-key": worker_key})
            assert worker.signing_key == SigningKey(SECRET)


def test_a_worker_uses_its_own_key_when_the_sender_has_none():
    with dask.config.set({"result-cache.url": URL, "result-cache.signing-key": None}):
        client = resolve_cache()
    assert client is not None and client.signing_key is None
    assert on_worker(client, **{"signing-key": OTHER}).signing_key == SigningKey(OTHER)
    assert on_worker(client, **{"signing-key": None}).signing_key is None
    # a malformed key on a worker is reported there, not fatal to the task
    assert on_worker(client, **{"signing-key": "short"}).signing_key is None


# -- Ed25519 (docs/protocol.md, "Public-key signatures") --------------------------------------


def raw_of(key: str) -> bytes:
    """docs/protocol.md: ``ed25519:`` + URL-safe base64 of the raw 32 bytes, unpadded."""
    assert key.startswith("ed25519:") and len(key) == 8 + 43
    return base64.urlsafe_b64decode(key[8:] + "=")


def test_ed25519_signatures_and_hashes_are_what_the_protocol_says():
    private, public = new_keypair()
    writer, reader = Ed25519Keys(private), Ed25519Keys(None, [public])
    assert writer.can_sign and not reader.can_sign
    fields = ("ab" * 16, "ndarray", "<f8", "[3,4]", "cd" * 16)
    body = "ee" * 32
    signature = writer.sign(*fields, body)
    version, kid, signed_body, sig = signature.split(".")
    assert (version, signed_body) == ("e1", body)
    assert kid == hashlib.sha256(raw_of(public)).hexdigest()[:16]
    message = (f"dask-result-cache signature e1\nhash={fields[0]}\nkind={fields[1]}\n"
               f"dtype={fields[2]}\nshape={fields[3]}\ndigest={fields[4]}\nbody={body}\n")
    Ed25519PublicKey.from_public_bytes(raw_of(public)).verify(bytes.fromhex(sig),
                                                              message.encode())
    assert (Ed25519PrivateKey.from_private_bytes(raw_of(private)).public_key()
            .public_bytes_raw() == raw_of(public))
    assert reader.verify(signature, *fields) == body == writer.verify(signature, *fields)
    # Public task hashes: the same for every process, whatever its keys.
    digest = b"\x01" * 16
    expected = hashlib.sha256(b"dask-result-cache task hash e1" + digest).digest()[:16].hex()
    assert writer.keyed_hash(digest) == reader.keyed_hash(digest) == expected
    assert Ed25519Keys(None, [new_keypair()[1]]).keyed_hash(digest) == expected


def test_an_ed25519_signature_binds_every_field_and_its_key():
    private, public = new_keypair()
    reader = Ed25519Keys(None, [public])
    fields = ["ab" * 16, "pickle", "", "", "cd" * 16]
    signature = Ed25519Keys(private).sign(*fields, "ee" * 32)
    for i, other in enumerate(["ef" * 16, "ndarray", "<f8", "[1]", "00" * 16]):
        changed = list(fields)
        changed[i] = other
        assert reader.verify(signature, *changed) is None, i
    assert Ed25519Keys(None, [new_keypair()[1]]).verify(signature, *fields) is None
    assert SigningKey(SECRET).verify(signature, *fields) is None
    version, kid, body, sig = signature.split(".")
    other_body = ".".join((version, kid, "ff" * 32, sig))
    flipped = signature[:-1] + ("0" if signature[-1] != "0" else "1")
    hmac_signed = SigningKey(SECRET).sign(*fields, "ee" * 32)
    for bad in (None, "", "e2" + signature[2:], signature + "0", signature[:-2], flipped,
                other_body, signature.upper(), signature + ".", "e1." + kid, hmac_signed):
        assert reader.verify(bad, *fields) is None, bad
    with pytest.raises(ValueError, match="trusted-keys but no private"):
        reader.sign(*fields, "ee" * 32)


def test_ed25519_keys_never_show_and_travel_to_the_workers():
    private, public = new_keypair()
    with dask.config.set({"result-cache.signing-key": private,
                          "result-cache.trusted-keys": None}):
        client = resolve_cache(URL)
    assert client is not None and client.signing_key.can_sign
    assert private not in repr(client.signing_key) and private[8:] not in repr(client)
    with dask.config.set({"result-cache.signing-key": None}):  # a worker without keys
        worker = pickle.loads(pickle.dumps(client))
    assert worker.signing_key == client.signing_key and worker.signing_key.can_sign
    with dask.config.set({"result-cache.signing-key": None, "result-cache.trusted-keys":
                          [public, new_keypair()[1]]}):
        reader = resolve_cache(URL)
    assert reader is not None and not reader.signing_key.can_sign
    assert not pickle.loads(pickle.dumps(reader)).signing_key.can_sign
    assert reader.put("ab" * 16, {"x": 1}, 1.0, "label") is False  # no request: no server
    # The environment variable reads back as text, two keys separated by a comma.
    pair = f"{public},{new_keypair()[1]}"
    read = dask.config.collect_env({"DASK_RESULT_CACHE__TRUSTED_KEYS": pair})
    with dask.config.set({"result-cache.signing-key": None, **read}):
        assert resolve_cache(URL).signing_key == Ed25519Keys(None, pair.split(","))


def test_bad_ed25519_keys_are_refused_when_configured():
    private, public = new_keypair()
    cases = [
        ({"result-cache.trusted-keys": "ed25519:short"}, ValueError, "trusted-keys.*43"),
        ({"result-cache.trusted-keys": public[:-1] + "="}, ValueError, "base64 of 32"),
        ({"result-cache.trusted-keys": public + ",nope"}, ValueError, "'nope' is not"),
        ({"result-cache.trusted-keys": 12}, TypeError, "trusted-keys must be"),
        ({"result-cache.signing-key": private[:-2]}, ValueError, "signing-key.*43"),
        ({"result-cache.signing-key": SECRET, "result-cache.trusted-keys": public},
         ValueError, "HMAC secret"),
    ]
    for config, error, message in cases:
        config = {"result-cache.signing-key": None, "result-cache.trusted-keys": None,
                  **config}
        with dask.config.set(config), pytest.raises(error, match=message) as raised:
            resolve_cache("http://127.0.0.1:1")
        assert private[12:] not in str(raised.value)  # never the private key itself
