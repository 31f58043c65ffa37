"""Ed25519 signatures (docs/protocol.md, "Public-key signatures").

With an HMAC secret (:mod:`.signing`) every process that can check a signature can also make
one, so any reader of a team cache could forge. Here a writer holds a private key
(``result-cache.signing-key = "ed25519:<private>"``) and readers hold only public keys
(``result-cache.trusted-keys``): they load what a trusted key signed and can sign nothing,
so they never store. Task hashes are not keyed by a secret (readers must compute them);
docs/correctness.md says what that reveals.

Keys are written ``ed25519:`` + the raw 32 bytes in URL-safe base64 without padding (43
characters); a signature is ``e1.<key id>.<body digest>.<signature>``: the key id is the
first 16 hex of SHA-256 over the raw public key, the signature 128 hex over the same fields
as the HMAC's v2 message under the version ``e1``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .signed_text import (
    BODY_CHARS,
    ED25519_PREFIX,
    decode_key,
    encode_key,
    is_hex,
    new_keypair,
    signed_fields,
    signed_message,
)

if TYPE_CHECKING:  # cryptography is imported by the first key made (~40 ms)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = ["ED25519_PREFIX", "ED25519_VERSION", "Ed25519Keys", "new_keypair"]

ED25519_VERSION = "e1"
_ID_CHARS = 16
_SIG_CHARS = 128
# Public, so that every reader computes the same hashes; apart from unsigned hashes, so
# that entries stored without a signature are never looked up by a signing team.
_HASH_CONTEXT = b"dask-result-cache task hash e1"
#: Why a process with only trusted keys stores nothing (its run report says so).
READ_ONLY_REASON = (
    "this process has result-cache.trusted-keys but no private "
    "result-cache.signing-key, so it cannot sign: nothing it stored would "
    "be loaded by anyone"
)


def key_id(public_raw: bytes) -> str:
    return hashlib.sha256(public_raw).hexdigest()[:_ID_CHARS]


def trusted_keys_of(value: object) -> list[str]:
    """The keys of ``result-cache.trusted-keys``: text separated by commas, or a list."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [k.strip() for k in value.split(",") if k.strip()]
    if isinstance(value, list | tuple) and all(isinstance(k, str) for k in value):
        return [k.strip() for k in value if k.strip()]
    raise TypeError(
        "result-cache.trusted-keys must be Ed25519 public keys separated by "
        f"commas, or a list of them, not {type(value).__name__}"
    )


class Ed25519Keys:
    """A process's Ed25519 keys: at most one private key (its public key is trusted too)
    and the trusted public keys. Immutable and thread safe; its ``repr`` never shows the
    private key. It pickles as its raw keys, private one included: that is how a writer's
    workers sign (as :class:`~.signing.SigningKey` travels as its derived keys)."""

    __slots__ = ("_private", "_trusted")

    def __init__(self, private: str | None = None, trusted: Iterable[str] = ()) -> None:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import (
            Ed25519PrivateKey,
            Ed25519PublicKey,
        )

        self._private: Ed25519PrivateKey | None = None
        if private is not None:
            self._private = Ed25519PrivateKey.from_private_bytes(
                decode_key(private, "result-cache.signing-key")
            )
        publics = [decode_key(k, "result-cache.trusted-keys") for k in trusted]
        if self._private is not None:
            publics.append(self._private.public_key().public_bytes_raw())
        if not publics:
            raise ValueError("Ed25519 keys need a private key or at least one trusted key")
        self._trusted = {key_id(raw): Ed25519PublicKey.from_public_bytes(raw) for raw in publics}

    @property
    def can_sign(self) -> bool:
        return self._private is not None

    def _raw(self) -> tuple[bytes | None, tuple[bytes, ...]]:
        private = None if self._private is None else self._private.private_bytes_raw()
        return private, tuple(sorted(k.public_bytes_raw() for k in self._trusted.values()))

    def __reduce__(self):
        return (_from_raw, self._raw())

    def __repr__(self) -> str:
        signer = "<private>, " if self._private is not None else ""
        return f"Ed25519Keys({signer}trusted={sorted(self._trusted)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Ed25519Keys):
            return False
        (mine, my_trusted), (theirs, their_trusted) = self._raw(), other._raw()
        return my_trusted == their_trusted and (
            mine is theirs is None
            or (mine is not None and theirs is not None and hmac.compare_digest(mine, theirs))
        )

    def __hash__(self) -> int:
        return hash((self.can_sign, tuple(sorted(self._trusted))))

    # -- task hashes ----------------------------------------------------------------------

    def keyed_hash(self, digest: bytes) -> str:
        """The published task hash (32 hex) of a task's 16-byte content digest: no secret
        goes into it, anyone can compute it."""
        return hashlib.sha256(_HASH_CONTEXT + digest).digest()[:16].hex()

    # -- signatures -----------------------------------------------------------------------

    def sign(
        self, task_hash: str, kind: str, dtype: str, shape: str, digest: str, body: str
    ) -> str:
        """``e1.<key id>.<body digest>.<signature>``; ``ValueError`` without a private key."""
        if self._private is None:
            raise ValueError(READ_ONLY_REASON)
        if len(body) != BODY_CHARS or not is_hex(body):
            raise ValueError(f"not a body digest: {body!r}")
        public = self._private.public_key().public_bytes_raw()
        signature = self._private.sign(
            signed_message(
                ED25519_VERSION, signed_fields(task_hash, kind, dtype, shape, digest, body)
            )
        )
        return f"{ED25519_VERSION}.{key_id(public)}.{body}.{signature.hex()}"

    def verify(
        self, signature: str | None, task_hash: str, kind: str, dtype: str, shape: str, digest: str
    ) -> str | None:
        """The body digest ``signature`` binds if a trusted key signed exactly this task and
        object, else ``None`` (also for ``None``, another version, an unknown key or
        malformed text). The caller then checks the body against it before decoding."""
        parts = signature.split(".") if signature else []
        if len(parts) != 4 or parts[0] != ED25519_VERSION:
            return None
        from cryptography.exceptions import InvalidSignature

        _, kid, body, sig = parts
        public = self._trusted.get(kid)
        if (
            public is None
            or len(body) != BODY_CHARS
            or not is_hex(body)
            or len(sig) != _SIG_CHARS
            or not is_hex(sig)
        ):
            return None
        try:
            public.verify(
                bytes.fromhex(sig),
                signed_message(
                    ED25519_VERSION, signed_fields(task_hash, kind, dtype, shape, digest, body)
                ),
            )
        except (InvalidSignature, ValueError):
            return None
        return body


def _from_raw(private: bytes | None, trusted: tuple[bytes, ...]) -> Ed25519Keys:
    return Ed25519Keys(
        None if private is None else encode_key(private), [encode_key(raw) for raw in trusted]
    )
