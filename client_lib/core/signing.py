"""Signed results and keyed task hashes (docs/protocol.md, "Signed results").

A cached pickle is code, and the content digest proves nothing about who wrote it. With
``result-cache.signing-key`` set, every stored object carries an HMAC-SHA256 that binds it
to its task (hash, kind, dtype, shape, content digest) and to its exact bytes through their
BLAKE3 digest (:mod:`.body_hash`: the xxh3 content digest is not cryptographic, so a
writer could match it with other bytes), and clients check both before anything is
decoded; task hashes are keyed as well, so nobody without the key can compute them.

The secret never leaves the clients. Two keys are derived from it, one per purpose, and only
those travel with the tasks to the workers (a :class:`SigningKey` pickles as them).

An ``ed25519:`` signing key, or ``result-cache.trusted-keys``, selects public-key signatures
instead (:mod:`.public_keys`): readers then check what they cannot sign.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING

from .config import setting
from .signed_text import BODY_CHARS, is_hex, signed_fields, signed_message

if TYPE_CHECKING:
    from .public_keys import Ed25519Keys

__all__ = ["MIN_SECRET_CHARS", "SIGNATURE_VERSION", "SigningKey", "configured_key"]

#: ``v1`` (no body digest: a body with the same xxh3 digest passed) is refused.
SIGNATURE_VERSION = "v2"
#: ``dask-cache keygen`` prints 64 hex characters (256 bits); shorter secrets are refused.
MIN_SECRET_CHARS = 32
_SIG_CONTEXT = b"dask-result-cache signature"
# "v2": keyed hashes changed with the signatures, so entries signed v1 are never looked up.
_HASH_CONTEXT = b"dask-result-cache task hash v2"


class SigningKey:
    """The keys derived from one team secret. Immutable and thread safe; its ``repr`` and
    its pickle never contain the secret itself."""

    __slots__ = ("_hash_key", "_sig_key")
    can_sign = True  # as :class:`~.public_keys.Ed25519Keys`, which may only check

    def __init__(self, secret: str) -> None:
        if not isinstance(secret, str):
            raise TypeError(f"result-cache.signing-key must be a string, not "
                            f"{type(secret).__name__}")
        if len(secret.strip()) < MIN_SECRET_CHARS:
            raise ValueError(f"result-cache.signing-key must be at least {MIN_SECRET_CHARS} "
                             "characters long: make one with `dask-cache keygen`")
        raw = secret.strip().encode("utf-8")
        self._sig_key = hmac.digest(raw, _SIG_CONTEXT, "sha256")
        self._hash_key = hmac.digest(raw, _HASH_CONTEXT, "sha256")

    def __reduce__(self):
        return (_from_derived, (self._sig_key, self._hash_key))

    def __repr__(self) -> str:
        return "SigningKey(<secret>)"

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, SigningKey)
                and hmac.compare_digest(self._sig_key, other._sig_key)
                and hmac.compare_digest(self._hash_key, other._hash_key))

    def __hash__(self) -> int:
        return hash(self._hash_key)

    # -- task hashes ----------------------------------------------------------------------

    def keyed_hash(self, digest: bytes) -> str:
        """The published task hash (32 hex) of a task's plain 16-byte content digest."""
        return hmac.digest(self._hash_key, digest, "sha256")[:16].hex()

    # -- signatures -----------------------------------------------------------------------

    def sign(self, task_hash: str, kind: str, dtype: str, shape: str, digest: str,
             body: str) -> str:
        """The ``X-Result-Signature`` of one stored object: ``v2.<body digest>.<mac>``,
        ``body`` being its :func:`~client_lib.wire.body_hash.body_root`."""
        if len(body) != BODY_CHARS or not is_hex(body):
            raise ValueError(f"not a body digest: {body!r}")
        mac = hmac.digest(self._sig_key, signed_message(SIGNATURE_VERSION, signed_fields(
            task_hash, kind, dtype, shape, digest, body)), "sha256")
        return f"{SIGNATURE_VERSION}.{body}.{mac.hex()}"

    def verify(self, signature: str | None, task_hash: str, kind: str, dtype: str,
               shape: str, digest: str) -> str | None:
        """The body digest ``signature`` binds, if it is ours for exactly this task and
        object (constant time in the signature), else ``None`` (also for ``None``, an
        unknown version or malformed text). The caller must then check the body against
        it before decoding anything."""
        if not signature:
            return None
        version, _, rest = signature.partition(".")
        body, _, _ = rest.partition(".")
        if version != SIGNATURE_VERSION or len(body) != BODY_CHARS or not is_hex(body):
            return None
        try:
            expected = self.sign(task_hash, kind, dtype, shape, digest, body)
        except ValueError:
            return None
        if not hmac.compare_digest(expected.encode("ascii"),
                                   signature.encode("ascii", errors="replace")):
            return None
        return body


def _from_derived(sig_key: bytes, hash_key: bytes) -> SigningKey:
    key = SigningKey.__new__(SigningKey)
    key._sig_key, key._hash_key = sig_key, hash_key
    return key


def configured_key() -> SigningKey | Ed25519Keys | None:
    """This process's keys, or None: ``result-cache.signing-key`` (env
    ``DASK_RESULT_CACHE__SIGNING_KEY``), an HMAC secret or ``ed25519:<private>``, and
    ``result-cache.trusted-keys`` (env ``DASK_RESULT_CACHE__TRUSTED_KEYS``), Ed25519 public
    keys. Raises ``ValueError`` (or ``TypeError``) for keys that are not keys."""
    secret, trusted = setting("signing-key"), setting("trusted-keys")
    if secret == "":
        secret = None
    # Dask parses environment values as Python literals
    if secret is not None and not isinstance(secret, str):
        raise TypeError("result-cache.signing-key was read as a number, which changes its "
                        "text: use a key from `dask-cache keygen` (never a number)")
    ed25519 = secret is not None and secret.strip().startswith("ed25519:")
    if trusted in (None, "", []) and not ed25519:
        return None if secret is None else SigningKey(secret)
    from .public_keys import Ed25519Keys, trusted_keys_of  # imports cryptography

    if secret is not None and not ed25519:
        raise ValueError("result-cache.trusted-keys are Ed25519 public keys, but "
                         "result-cache.signing-key is an HMAC secret: use a pair from "
                         "`dask-cache keygen --ed25519`, or no trusted keys")
    return Ed25519Keys(secret, trusted_keys_of(trusted))
