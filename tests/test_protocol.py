"""``client_lib`` and the server implement docs/protocol.md independently; they must agree
on what travels (kind, dtype, shape text) and on the content digest of every value."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from client_lib.wire import codec
from storage import ObjectHeader, content_digest

dtypes = (hnp.integer_dtypes() | hnp.unsigned_integer_dtypes() | hnp.floating_dtypes()
          | hnp.complex_number_dtypes() | hnp.boolean_dtypes() | hnp.datetime64_dtypes()
          | hnp.timedelta64_dtypes() | hnp.byte_string_dtypes(max_len=4)
          | hnp.unicode_string_dtypes(max_len=4))
arrays = hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
objects = st.recursive(st.none() | st.integers() | st.text() | st.floats(allow_nan=False),
                       lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                       max_leaves=10)


def _server_digest(enc: codec.Encoded) -> str:
    header = ObjectHeader.from_wire(enc.kind, enc.dtype or None, enc.shape or None)
    return content_digest(header, enc.body)


@settings(max_examples=150, deadline=None)
@given(arrays, st.booleans())
def test_arrays_travel_raw_and_both_sides_agree_on_the_digest(arr, fortran):
    value = np.array(arr, order="F") if fortran else arr
    enc = codec.encode(value)
    assert enc.kind == "ndarray"
    assert enc.nbytes == arr.nbytes
    assert _server_digest(enc) == enc.digest
    back = codec.decode(enc.kind, enc.dtype, enc.shape, bytearray(enc.body))
    assert back.dtype == arr.dtype and back.shape == arr.shape
    assert back.tobytes() == np.ascontiguousarray(arr).tobytes()
    assert back.flags.writeable


@settings(max_examples=60, deadline=None)
@given(objects)
def test_other_values_travel_pickled_and_both_sides_agree(value):
    enc = codec.encode(value)
    assert enc.kind == "pickle" and enc.dtype == "" and enc.shape == ""
    assert _server_digest(enc) == enc.digest
    assert codec.decode(enc.kind, "", "", bytes(enc.body)) == value


def test_subclasses_and_object_arrays_are_pickled():
    for value in (np.ma.masked_array([1, 2], mask=[0, 1]), np.array([1, "a"], dtype=object),
                  np.zeros(2, dtype=[("a", "i4"), ("b", "f8")]), np.float64(2.5)):
        enc = codec.encode(value)
        assert enc.kind == "pickle"
        back = codec.decode(enc.kind, "", "", bytes(enc.body))
        assert type(back) is type(value)


def test_equal_bytes_with_another_shape_are_another_object():
    a = np.arange(6.0)
    assert codec.encode(a).digest != codec.encode(a.reshape(2, 3)).digest


def test_the_server_takes_the_protocol_facts_from_client_lib_wire():
    """Each bound, header name and the batch format is defined once (client_lib/wire) and
    the server uses that definition, so the two sides cannot drift apart."""
    from cache_server import models
    from cache_server.api.routers import objects
    from cache_server.settings import Settings
    from client_lib.wire import batch, bounds

    assert models.MAX_COMPUTE_SECONDS is bounds.MAX_COMPUTE_SECONDS
    assert (models.MIN_LEASE_SECONDS, models.MAX_LEASE_SECONDS) == (
        bounds.MIN_LEASE_SECONDS, bounds.MAX_LEASE_SECONDS)
    assert Settings().max_lease_hashes == bounds.LEASE_BATCH
    items = [({"hash": "a" * 32, "nbytes": 3}, b"abc"), ({"hash": "b" * 32, "nbytes": 0}, b"")]
    assert batch.unpack(batch.pack(items)) == items
    assert objects._BATCH == batch.MEDIA_TYPE


def test_the_client_speaks_the_lease_routes(cache_server):
    import uuid

    from client_lib import CacheClient

    client = CacheClient(cache_server.url)
    mine, theirs = uuid.uuid4().hex, uuid.uuid4().hex
    hashes = [uuid.uuid4().hex for _ in range(3)]
    assert client.acquire_leases(hashes, mine, 30) == (set(hashes), set(), set())
    assert client.acquire_leases(hashes[:1], theirs, 30) == (set(), set(), {hashes[0]})
    assert client.renew_leases({hashes[0]: 4.0, hashes[1]: None}, mine, 30) == set(
        hashes[:2])
    status = client.lease_status(hashes[0])
    assert status["leased"] and status["estimate"] == 4.0 and not status["stored"]
    assert client.release_leases(hashes, theirs) == 0
    assert client.release_leases(hashes, mine) == 3
    assert not client.lease_status(hashes[0])["leased"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3000), min_size=0, max_size=4),
       st.sampled_from([1, 2, 8, 16, 4096, 3 * 2**20, 17 * 2**20]))
def test_both_sides_cut_arrays_into_the_same_chunks(shape, itemsize):
    """The signed body digest's pieces (client_lib/wire/body_hash.py) are storage's Zarr chunks:
    a lazy reader verifies one chunk against one piece digest."""
    from client_lib.wire.body_hash import CHUNK_TARGET_BYTES, chunk_shape
    from storage import _zarr

    assert CHUNK_TARGET_BYTES == _zarr.CHUNK_TARGET_BYTES
    assert chunk_shape(tuple(shape), itemsize) == _zarr.chunk_shape(tuple(shape), itemsize)


@settings(max_examples=100, deadline=None)
@given(hnp.arrays(st.sampled_from(["<f8", "|u1", "<i2"]),
                  hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=40)),
       st.integers(1, 4000))
def test_an_arrays_pieces_are_its_chunks_in_grid_order(arr, target):
    """Cut with a small chunk target, an array's pieces are its Zarr chunks' bytes in C
    order of the grid, as storage records their digests."""
    import itertools
    import json

    from client_lib.wire import body_hash

    original = body_hash.CHUNK_TARGET_BYTES
    body_hash.CHUNK_TARGET_BYTES = target
    try:
        enc = codec.encode(arr)
        sizes = list(body_hash.piece_sizes(enc.kind, enc.dtype, enc.shape, enc.nbytes))
        chunks = body_hash.chunk_shape(arr.shape, arr.dtype.itemsize)
    finally:
        body_hash.CHUNK_TARGET_BYTES = original
    assert sum(sizes) == arr.nbytes
    if arr.size == 0:
        assert sizes == [0]
        return
    grid = [range(0, n, c) for n, c in zip(arr.shape, chunks, strict=True)]
    expected = [arr[tuple(slice(s, s + c) for s, c in zip(start, chunks, strict=True))]
                .tobytes() for start in itertools.product(*grid)]
    body = bytes(enc.body)
    got, pos = [], 0
    for size in sizes:
        got.append(body[pos:pos + size])
        pos += size
    assert got == expected, json.dumps([len(g) for g in got])
