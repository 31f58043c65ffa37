"""Signed results on the client (docs/protocol.md, "Signed results"): which key a client
holds, the signature it sends with a store, and the checks a load passes before anything
is decoded: the signature in the entry's headers, then the body against the BLAKE3 body
digest that signature binds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.errors import CacheEntryUntrusted
from ..core.notices import warn_once
from ..core.public_keys import READ_ONLY_REASON, Ed25519Keys
from ..core.signing import SigningKey, configured_key
from ..wire import codec
from ..wire.body_hash import body_root

__all__ = ["FROM_CONFIG", "NOT_THE_SIGNED_BODY", "UNTRUSTED", "check_body", "own_key",
           "resolve_key", "sign", "signed_body", "why_no_stores"]

FROM_CONFIG: Any = object()  # "this process's result-cache.signing-key"
UNTRUSTED = ("no valid signature for result-cache.signing-key (or trusted-keys); "
             "not loaded")

Keys = SigningKey | Ed25519Keys


def resolve_key(value: Keys | str | None) -> Keys | None:
    """The key a client signs and checks with: ``FROM_CONFIG`` (this process's
    ``result-cache.signing-key`` and ``trusted-keys``), a secret, an ``ed25519:`` private
    key, a :class:`SigningKey`, :class:`Ed25519Keys` or ``None``."""
    if value is FROM_CONFIG:
        return configured_key()
    if value is None or isinstance(value, SigningKey | Ed25519Keys):
        return value
    if isinstance(value, str) and value.strip().startswith("ed25519:"):
        return Ed25519Keys(value)
    return SigningKey(value)


def why_no_stores(key: Keys | None) -> str | None:
    """Why a client with ``key`` must not store (``None``: it may): with only trusted
    Ed25519 keys it cannot sign, and nobody would load what it stored."""
    return None if key is None or key.can_sign else READ_ONLY_REASON


def own_key() -> Keys | None:
    """This (worker) process's configured key; a malformed one is reported, not fatal here:
    the task must not fail for it, and without a key nothing is loaded unchecked that the
    sender would have checked (the sender had no key either)."""
    try:
        return configured_key()
    except (TypeError, ValueError) as exc:
        warn_once(f"result cache: ignoring this process's result-cache.signing-key: {exc}",
                  key="bad signing key")
        return None


#: Why a body whose digest matches but whose BLAKE3 body digest does not is refused.
NOT_THE_SIGNED_BODY = "the body is not the one its signature binds; not loaded"


def sign(key: Keys, task_hash: str, enc: codec.Encoded) -> str:
    """The signature of one stored object (its metadata and its body digest)."""
    return key.sign(task_hash, enc.kind, enc.dtype, enc.shape, enc.digest,
                    body_root(enc.kind, enc.dtype, enc.shape, enc.body))


def signed_body(key: Keys | None, task_hash: str,
                headers: Mapping[str, str]) -> str | None:
    """The body digest our signature in an object's headers binds for ``task_hash``
    (``""`` for a client without a key, which checks nothing), or ``None``: no valid
    signature."""
    if key is None:
        return ""
    return key.verify(headers.get("x-result-signature"), task_hash,
                      headers.get("x-result-kind", ""), headers.get("x-result-dtype", ""),
                      headers.get("x-result-shape", ""), headers.get("x-result-digest", ""))


def check_body(task_hash: str, signed: str, kind: str, dtype: str, shape: str,
               body: Any) -> None:
    """Raise :class:`CacheEntryUntrusted` unless ``body`` has the body digest ``signed``
    binds (nothing to check for ``""``: a client without a key). Bytes that match the
    content digest but not this were written to pass for the signed ones."""
    if signed and body_root(kind, dtype, shape, body) != signed:
        raise CacheEntryUntrusted(task_hash, NOT_THE_SIGNED_BODY)
