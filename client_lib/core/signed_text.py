"""What a signature signs, and how keys are written (docs/protocol.md, "Signed results" and
"Public-key signatures"): the message lines both kinds of signature cover, the body digest's
form, and the text of an Ed25519 key; shared by :mod:`.signing` (HMAC) and
:mod:`.public_keys` (Ed25519). ``dask-cache keygen --ed25519`` writes keys the same way
(tests/reliability/test_public_keys.py reads its output with these)."""

from __future__ import annotations

import base64
from collections.abc import Sequence

__all__ = [
    "BODY_CHARS",
    "ED25519_PREFIX",
    "decode_key",
    "encode_key",
    "is_hex",
    "new_keypair",
    "signed_fields",
    "signed_message",
]

#: Hex characters of a body digest (client_lib/wire/body_hash.py).
BODY_CHARS = 64
ED25519_PREFIX = "ed25519:"
_KEY_CHARS = 43  # base64 of 32 bytes, unpadded
_SIGNATURE_PREFIX = b"dask-result-cache signature "


def signed_fields(
    task_hash: str, kind: str, dtype: str, shape: str, digest: str, body: str
) -> list[tuple[str, str]]:
    """The signed fields of versions ``v2`` and ``e1``, in order. A later version appends
    fields under a new version string."""
    return [
        ("hash", task_hash),
        ("kind", kind),
        ("dtype", dtype),
        ("shape", shape),
        ("digest", digest),
        ("body", body),
    ]


def is_hex(text: str) -> bool:
    return all(c in "0123456789abcdef" for c in text)


def signed_message(version: str, fields: Sequence[tuple[str, str]]) -> bytes:
    lines = [_SIGNATURE_PREFIX + version.encode("ascii")]
    for name, value in fields:
        if "\n" in value or not value.isascii():
            raise ValueError(f"{name} cannot be signed: {value!r}")
        lines.append(f"{name}={value}".encode("ascii"))
    return b"\n".join(lines) + b"\n"


def encode_key(raw: bytes) -> str:
    return ED25519_PREFIX + base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def decode_key(text: object, setting: str) -> bytes:
    """The 32 raw bytes of ``ed25519:<43 characters>``; ``ValueError`` naming ``setting``
    for anything else (a canonical encoding only: one text per key)."""
    if not isinstance(text, str):
        raise TypeError(
            f"{setting} must be text like 'ed25519:<43 characters>', not {type(text).__name__}"
        )
    text = text.strip()
    body = text[len(ED25519_PREFIX) :]
    if not text.startswith(ED25519_PREFIX) or len(body) != _KEY_CHARS:
        raise ValueError(
            f"{setting}: {_shown(text)} is not an Ed25519 key "
            "('ed25519:' and 43 characters, as `dask-cache keygen --ed25519` "
            "prints)"
        )
    try:
        raw = base64.urlsafe_b64decode(body + "=")
    except ValueError:
        raw = b""
    if len(raw) != 32 or encode_key(raw) != text:
        raise ValueError(f"{setting}: {_shown(text)} is not URL-safe base64 of 32 bytes")
    return raw


def _shown(text: str) -> str:
    """Enough of a malformed key to find it, never all of it (it may be a private key)."""
    return repr(text[: len(ED25519_PREFIX) + 4] + "...") if len(text) > 12 else repr(text)


def new_keypair() -> tuple[str, str]:
    """A new ``(private, public)`` pair, encoded."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    return (
        encode_key(private.private_bytes_raw()),
        encode_key(private.public_key().public_bytes_raw()),
    )
