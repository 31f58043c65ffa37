"""The behaviour every :class:`storage.ObjectStore` must show.

Each backend's test module subclasses :class:`StoreContract` and provides a ``store`` fixture;
the same tests then run against every implementation (like zarr-python's store tests).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle
import fsspec
import numpy as np
import pytest

from storage import (
    BatchItem,
    BodySizeMismatch,
    CorruptObject,
    DigestMismatch,
    InvalidBody,
    InvalidHeader,
    ObjectHeader,
    ObjectNotFound,
    ObjectStore,
    PayloadTooLarge,
    PutResult,
    Staging,
    StagingNotFound,
    StagingUnsupported,
    TaskReference,
    content_digest,
)


@dataclass(frozen=True)
class Encoded:
    """An encoded value as the client would send it."""

    header: ObjectHeader
    body: bytes
    digest: str

    def chunks(self, size: int = 1000) -> list[bytes]:
        return [self.body[i : i + size] for i in range(0, len(self.body), size)]


def encode_array(value: np.ndarray) -> Encoded:
    header = ObjectHeader.array(value.dtype, value.shape)
    body = np.ascontiguousarray(value).tobytes()
    return Encoded(header, body, content_digest(header, body))


def encode_pickle(value: object) -> Encoded:
    header = ObjectHeader.pickle()
    body = cloudpickle.dumps(value, protocol=5)
    return Encoded(header, body, content_digest(header, body))


def encode_parquet(body: bytes) -> Encoded:
    """A ``parquet`` object: storage keeps its bytes whatever they hold."""
    header = ObjectHeader.parquet()
    return Encoded(header, body, content_digest(header, body))


def task(n: int = 1, label: str = "step") -> TaskReference:
    return TaskReference(f"{n:032x}", label, 0.5 * n, 1764460000.0 + n)


class Files:
    """A store's files as the tests see them, through fsspec (the local filesystem, or the
    bucket of a :class:`~storage.BucketStorage`): where its objects and temporary areas
    are, to inspect and damage them."""

    def __init__(self, fs: Any, root: str, object_dir: Any) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.object_dir = object_dir  # digest -> the object's directory

    @classmethod
    def of(cls, store: Any) -> Files:
        if hasattr(store, "fs"):  # BucketStorage
            return cls(store.fs, store.root, lambda d: f"{store.root}/{d[:2]}/{d}")
        return cls(fsspec.filesystem("file"), str(store.root),
                   lambda d: str(store.object_path(d)))

    def _below_root(self, withdirs: bool = False) -> list[str]:
        if not self.fs.exists(self.root):
            return []
        return [p.rstrip("/") for p in self.fs.find(self.root, withdirs=withdirs)]

    def _temporary(self, path: str) -> bool:
        return any(area in path[len(self.root):] for area in ("/.tmp/", "/.staging/"))

    def visible(self) -> list[str]:
        """Every file under the root outside its temporary areas."""
        return [p for p in self._below_root() if not self._temporary(p)]

    def leftovers(self) -> list[str]:
        """Whatever is left inside the temporary areas."""
        return [p for p in self._below_root(withdirs=True) if self._temporary(p)]

    def flip_in_last_piece(self, digest: str) -> None:
        """Flip a byte of the body's last piece: the first of the last of several chunk
        files (an edge chunk's end is padding), else the one file's last."""
        files = sorted(p for p in self.payloads(digest) if not p.endswith(".json"))
        data = bytearray(self.read(files[-1]))
        data[0 if len(files) > 1 else -1] ^= 0x40
        self.write(files[-1], bytes(data))

    def payloads(self, digest: str) -> list[str]:
        """The files of one stored object other than its sidecar, largest first."""
        found = self.fs.find(self.object_dir(digest), detail=True)
        files = [(info["size"], path) for path, info in found.items()
                 if not path.endswith("/sidecar.json")]
        return [path for _, path in sorted(files, reverse=True)]

    def sidecar(self, digest: str) -> str:
        return f"{self.object_dir(digest)}/sidecar.json"

    def read(self, path: str) -> bytes:
        return self.fs.cat_file(path)

    def write(self, path: str, data: bytes) -> None:
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(path, data)

    def remove(self, path: str) -> None:
        self.fs.rm_file(path)


def staged_files(staging: Staging, encoded: Encoded) -> dict[str, bytes]:
    """The files a writer outside the server stages for ``encoded`` (storage.base.Staging:
    the layout is part of the protocol, so this is written from its description)."""
    if staging.layout == "blob":
        return {"blob": encoded.header.digest_prefix() + encoded.body}
    if staging.layout == "parquet":
        return {"data.parquet": encoded.body}
    assert staging.layout == "zarr" and staging.metadata is not None
    header = encoded.header
    chunks = staging.metadata["chunk_grid"]["configuration"]["chunk_shape"]
    separator = staging.metadata["chunk_key_encoding"]["configuration"]["separator"]
    value = np.frombuffer(encoded.body, dtype=header.numpy_dtype).reshape(header.shape)
    files = {}
    grid = [range(0, n, c) for n, c in zip(header.shape, chunks, strict=True)]
    for corner in itertools.product(*grid):
        region = tuple(slice(a, a + c) for a, c in zip(corner, chunks, strict=True))
        key = separator.join(["c", *(str(a // c) for a, c in zip(corner, chunks, strict=True))])
        files[key] = np.ascontiguousarray(value[region]).tobytes()
    return files


def write_staged(staging: Staging, files: dict[str, bytes]) -> Path:
    directory = Path(fsspec.core.url_to_fs(staging.location)[1])
    for name, data in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(data)
    return directory


def failing_chunks(encoded: Encoded, after: int) -> Iterator[bytes]:
    for i, chunk in enumerate(encoded.chunks(100)):
        if i == after:
            raise ConnectionError("client went away")
        yield chunk


class StoreContract:
    """Contract tests; subclasses provide the ``store`` fixture (an empty store), and
    override :meth:`plant_crash_leftovers` where a crash leaves other things."""

    def files(self, store: ObjectStore) -> Files:
        return Files.of(store)

    def location_options(self, store: ObjectStore) -> dict[str, Any]:
        """fsspec options a direct reader of this store's locations needs."""
        return {}

    def plant_crash_leftovers(self, store: ObjectStore, digest: str) -> list[str]:
        """Leave what crashes leave beside the stored object ``digest``: a write under the
        backend's own ``.tmp``, a sidecar rewrite's temporary; the paths."""
        directory = store.object_path(digest)  # type: ignore[attr-defined]
        crashed = directory.parent.parent / ".tmp" / "put-crashed"
        crashed.mkdir(parents=True)
        (crashed / "blob").write_bytes(b"half")
        stray = directory / ".sidecar.json.0123"
        stray.write_bytes(b"{")
        return [str(crashed), str(stray)]

    @pytest.fixture
    def store(self, tmp_path: Path) -> ObjectStore:
        raise NotImplementedError

    def samples(self, store: ObjectStore) -> list[Encoded]:
        """Values of every kind the store accepts."""
        rng = np.random.default_rng(0)
        candidates = [
            encode_array(rng.standard_normal((20, 30))),
            encode_array(np.array([b"a\x00", b"", b"\x00\x00"], dtype="S2")),
            encode_pickle({"a": [1, 2.5, None], "b": ("x", b"y")}),
            encode_parquet(b"PAR1" + bytes(range(256)) * 20 + b"PAR1"),
        ]
        accepted = [c for c in candidates if store.accepts(c.header)]
        assert accepted, "a store must accept at least one sample"
        return accepted

    def put(self, store: ObjectStore, encoded: Encoded, n: int = 1, type_name: str | None = None):
        return store.put(
            encoded.header,
            encoded.chunks(),
            digest=encoded.digest,
            task=task(n),
            type_name=type_name,
        )

    def test_has_a_name(self, store: ObjectStore) -> None:
        assert isinstance(store.name, str) and store.name

    def test_round_trip(self, store: ObjectStore) -> None:
        for encoded in self.samples(store):
            result = self.put(store, encoded, type_name="builtins.object")
            assert result.created
            stored = store.get(encoded.digest)
            assert bytes(stored.body) == encoded.body
            sidecar = stored.sidecar
            assert sidecar.digest == encoded.digest
            assert sidecar.header == encoded.header
            assert sidecar.nbytes == len(encoded.body) == store.size(encoded.digest)
            assert sidecar.type == "builtins.object"
            assert sidecar.storage in ("blob", "zarr", "parquet")
            assert dict(sidecar.tasks) == {task(1).task_hash: task(1)}
            assert sidecar.created == task(1).created
            assert store.exists(encoded.digest)
            assert store.sidecar(encoded.digest) == sidecar

    def test_put_batch(self, store: ObjectStore) -> None:
        samples = self.samples(store)
        bad = samples[0]
        wrong = content_digest(bad.header, bad.body + b"!")
        self.put(store, samples[-1], n=9)  # exists already: gets the batch's task too
        items = [BatchItem(e.header, e.body, e.digest, task(i + 1), "builtins.object")
                 for i, e in enumerate(samples)]
        items.insert(1, BatchItem(bad.header, bad.body, wrong, task(7)))
        results = store.put_batch(items)
        assert len(results) == len(items)
        assert isinstance(results[1], DigestMismatch) and not store.exists(wrong)
        good = [r for i, r in enumerate(results) if i != 1]
        for i, (encoded, result) in enumerate(zip(samples, good, strict=True)):
            assert isinstance(result, PutResult)
            assert result.created == (encoded is not samples[-1])
            assert bytes(store.get(encoded.digest).body) == encoded.body
            assert task(i + 1).task_hash in store.sidecar(encoded.digest).tasks
        assert self.files(store).leftovers() == []

    def test_put_batch_of_one_value_lists_every_task(self, store: ObjectStore) -> None:
        # Many tasks share a value (None, 0): one object, every task in its sidecar, in the
        # batch that creates it and in the next.
        encoded = self.samples(store)[-1]
        for first in (1, 201):
            items = [BatchItem(encoded.header, encoded.body, encoded.digest, task(n))
                     for n in range(first, first + 200)]
            results = store.put_batch(items)
            assert all(isinstance(r, PutResult) for r in results), results
            assert [r.created for r in results].count(True) == (first == 1)
        assert set(store.sidecar(encoded.digest).tasks) == {task(n).task_hash
                                                           for n in range(1, 401)}
        assert self.files(store).leftovers() == []

    def test_array_view_of_stored_array(self, store: ObjectStore) -> None:
        value = np.arange(12, dtype="<i4").reshape(3, 4)
        encoded = encode_array(value)
        if not store.accepts(encoded.header):
            return
        self.put(store, encoded)
        np.testing.assert_array_equal(store.get(encoded.digest).array(), value)

    def test_missing_object(self, store: ObjectStore) -> None:
        digest = "0" * 32
        assert not store.exists(digest)
        for call in (store.get, store.sidecar, store.size):
            with pytest.raises(ObjectNotFound):
                call(digest)
        with pytest.raises(ObjectNotFound):
            store.get("../../etc/passwd")
        assert not store.exists("not-a-digest")

    def test_wrong_digest_publishes_nothing(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        wrong = content_digest(encoded.header, encoded.body + b"!")
        with pytest.raises(DigestMismatch):
            store.put(encoded.header, encoded.chunks(), digest=wrong, task=task())
        assert not store.exists(wrong) and not store.exists(encoded.digest)
        assert list(store.digests()) == []
        assert self.files(store).visible() == []

    def test_wrong_array_length_publishes_nothing(self, store: ObjectStore) -> None:
        encoded = encode_array(np.arange(100, dtype="<u2"))
        if not store.accepts(encoded.header):
            return
        for body in (encoded.body[:-2], encoded.body + b"\x00\x00", b""):
            digest = content_digest(encoded.header, body)
            with pytest.raises(BodySizeMismatch):
                store.put(encoded.header, [body], digest=digest, task=task())
        assert list(store.digests()) == []
        assert self.files(store).visible() == []

    def test_bool_body_must_be_zeros_and_ones(self, store: ObjectStore) -> None:
        header = ObjectHeader.array("|b1", (4,))
        body = b"\x00\x01\x02\x01"
        if not store.accepts(header):
            return
        with pytest.raises(InvalidBody):
            store.put(header, [body], digest=content_digest(header, body), task=task())
        assert self.files(store).visible() == []

    def test_failure_mid_write_publishes_nothing(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        with pytest.raises(ConnectionError):
            store.put(
                encoded.header, failing_chunks(encoded, after=3), digest=encoded.digest, task=task()
            )
        assert not store.exists(encoded.digest)
        assert list(store.digests()) == []
        assert self.files(store).visible() == []
        assert self.files(store).leftovers() == []

    def test_writer_takes_pieces_as_they_come(self, store: ObjectStore) -> None:
        for encoded in self.samples(store):
            cuts = [0, 1, 8, 1008, 1011, len(encoded.body)]  # pieces of any size
            with store.open_writer(encoded.header, digest=encoded.digest, task=task()) as w:
                for start, stop in itertools.pairwise(cuts):
                    w.write(encoded.body[start:stop])
                assert w.commit().created
            assert bytes(store.get(encoded.digest).body) == encoded.body

    def test_aborted_writer_leaves_nothing(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        writer = store.open_writer(encoded.header, digest=encoded.digest, task=task())
        writer.write(encoded.body[: len(encoded.body) // 2])
        writer.abort()
        writer.abort()  # idempotent
        assert not store.exists(encoded.digest)
        assert self.files(store).visible() == []
        assert self.files(store).leftovers() == []

    def test_writer_memory_follows_the_bytes_not_the_declared_size(
            self, store: ObjectStore) -> None:
        """A client declaring 1 GiB (or one 1 GiB element) and sending 16 bytes costs a
        buffer of at most one chunk, never the declared size (issue 11, item 4)."""
        for header in (ObjectHeader.array("<f8", (2**27,)),
                       ObjectHeader.array(f"|S{2**30}", (1,))):
            if not store.accepts(header):
                continue
            body = b"\x00" * 16
            tracemalloc.start()
            try:
                with store.open_writer(header, digest=content_digest(header, body),
                                       task=task()) as writer:
                    writer.write(body)
                    with pytest.raises(BodySizeMismatch):
                        writer.commit()
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            assert peak < 40 * 2**20, header
            assert self.files(store).visible() == []

    def test_reader_hands_out_bounded_verified_pieces(self, store: ObjectStore) -> None:
        """A 20 MiB object comes back in pieces no larger than ``piece_bytes`` (never the
        whole object at once), and a flipped byte in its last piece is refused before
        that piece is handed out."""
        rng = np.random.default_rng(5)
        for encoded in (encode_array(rng.random(20 * 2**20 // 8)),
                        encode_pickle(rng.bytes(20 * 2**20))):
            if not store.accepts(encoded.header):
                continue
            self.put(store, encoded)
            with store.open_reader(encoded.digest) as reader:
                assert reader.sidecar.digest == encoded.digest
                pieces = list(iter(reader.read, None))
            assert len(pieces) > 1
            assert all(p.nbytes <= reader.piece_bytes < 20 * 2**20 for p in pieces)
            assert b"".join(pieces) == encoded.body
            self.files(store).flip_in_last_piece(encoded.digest)
            with store.open_reader(encoded.digest) as reader, pytest.raises(CorruptObject):
                while reader.read() is not None:
                    pass

    def test_leftover_temporary_write_is_invisible(self, store: ObjectStore) -> None:
        """A crash mid-write leaves a directory under .tmp: never listed, never served."""
        encoded = self.samples(store)[0]
        files = self.files(store)
        files.write(f"{files.root}/.tmp/put-crashed/{encoded.digest}/sidecar.json", b"{}")
        assert list(store.digests()) == []
        assert not store.exists(encoded.digest)
        assert self.put(store, encoded).created

    def test_put_existing_digest_is_idempotent(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        assert self.put(store, encoded, n=1).created
        again = self.put(store, encoded, n=2)
        assert not again.created
        assert set(again.sidecar.tasks) == {task(1).task_hash, task(2).task_hash}
        assert set(store.sidecar(encoded.digest).tasks) == set(again.sidecar.tasks)
        assert not self.put(store, encoded, n=2).created
        assert list(store.digests()) == [encoded.digest]

    def test_put_existing_digest_still_verifies_the_body(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        self.put(store, encoded)
        wrong = encoded.body[:-1] + bytes([encoded.body[-1] ^ 1])
        with pytest.raises(DigestMismatch):
            store.put(encoded.header, [wrong], digest=encoded.digest, task=task(2))
        assert set(store.sidecar(encoded.digest).tasks) == {task(1).task_hash}
        assert bytes(store.get(encoded.digest).body) == encoded.body

    def test_task_references(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        self.put(store, encoded, n=1)
        store.add_task(encoded.digest, task(3))
        assert list(store.sidecar(encoded.digest).tasks) == [task(1).task_hash, task(3).task_hash]
        store.remove_task(encoded.digest, task(1).task_hash)
        store.remove_task(encoded.digest, task(9).task_hash)  # absent: no error
        assert list(store.sidecar(encoded.digest).tasks) == [task(3).task_hash]
        assert bytes(store.get(encoded.digest).body) == encoded.body
        with pytest.raises(ObjectNotFound):
            store.add_task("f" * 32, task(1))

    def test_pins_are_recorded_in_the_sidecar(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        self.put(store, encoded, n=1)
        store.add_task(encoded.digest, task(2))
        store.set_pinned(encoded.digest, task(2).task_hash, True)
        pins = {h: t.pinned for h, t in store.sidecar(encoded.digest).tasks.items()}
        assert pins == {task(1).task_hash: False, task(2).task_hash: True}
        store.set_pinned(encoded.digest, task(2).task_hash, False)
        assert not any(t.pinned for t in store.sidecar(encoded.digest).tasks.values())
        with pytest.raises(KeyError):
            store.set_pinned(encoded.digest, task(5).task_hash, True)

    def test_sweep_removes_interrupted_writes_only(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        self.put(store, encoded)
        planted = self.plant_crash_leftovers(store, encoded.digest)
        files = self.files(store)
        assert store.sweep_temporary(older_than=3600) == 0  # too young: maybe in progress
        assert store.sweep_temporary() == len(planted)
        assert files.leftovers() == [] and not any(files.fs.exists(p) for p in planted)
        assert bytes(store.get(encoded.digest).body) == encoded.body

    def test_delete(self, store: ObjectStore) -> None:
        first, *rest = self.samples(store)
        self.put(store, first)
        for encoded in rest:
            self.put(store, encoded)
        assert store.delete(first.digest)
        assert not store.exists(first.digest)
        with pytest.raises(ObjectNotFound):
            store.get(first.digest)
        assert not store.delete(first.digest)
        assert sorted(store.digests()) == sorted(e.digest for e in rest)
        assert self.put(store, first).created  # storable again

    def test_iteration(self, store: ObjectStore) -> None:
        samples = self.samples(store)
        for n, encoded in enumerate(samples):
            self.put(store, encoded, n=n)
        assert sorted(store.digests()) == sorted(e.digest for e in samples)
        sidecars = {s.digest: s for s in store.sidecars()}
        assert set(sidecars) == {e.digest for e in samples}
        for n, encoded in enumerate(samples):
            assert list(sidecars[encoded.digest].tasks) == [task(n).task_hash]

    def test_corrupt_payload_is_detected(self, store: ObjectStore) -> None:
        for encoded in self.samples(store):
            self.put(store, encoded)
            files = self.files(store)
            target = files.payloads(encoded.digest)[0]
            data = bytearray(files.read(target))
            data[len(data) // 2] ^= 0x40
            files.write(target, bytes(data))
            with pytest.raises(CorruptObject):
                store.get(encoded.digest)

    def test_truncated_payload_is_detected(self, store: ObjectStore) -> None:
        for encoded in self.samples(store):
            self.put(store, encoded)
            files = self.files(store)
            target = files.payloads(encoded.digest)[0]
            files.write(target, files.read(target)[:-7])
            with pytest.raises(CorruptObject):
                store.get(encoded.digest)

    def test_missing_payload_file_is_detected(self, store: ObjectStore) -> None:
        """A lost Zarr chunk reads back as fill values: only the digest notices."""
        for encoded in self.samples(store):
            self.put(store, encoded)
            files = self.files(store)
            files.remove(files.payloads(encoded.digest)[0])
            with pytest.raises((CorruptObject, ObjectNotFound)):
                store.get(encoded.digest)

    def test_corrupt_sidecar_is_detected(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        self.put(store, encoded)
        files = self.files(store)
        files.write(files.sidecar(encoded.digest), b"{not json")
        with pytest.raises(CorruptObject):
            store.get(encoded.digest)

    def test_rejects_what_it_does_not_accept(self, store: ObjectStore) -> None:
        encoded = encode_pickle(object)
        if store.accepts(encoded.header):
            return
        with pytest.raises(InvalidHeader):
            store.put(encoded.header, [encoded.body], digest=encoded.digest, task=task())

    def test_concurrent_puts_of_one_digest(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        results = []
        barrier = threading.Barrier(4)

        def put(n: int) -> None:
            barrier.wait()
            results.append(self.put(store, encoded, n=n))

        threads = [threading.Thread(target=put, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(r.created for r in results) == 1
        assert set(store.sidecar(encoded.digest).tasks) == {task(n).task_hash for n in range(4)}
        assert bytes(store.get(encoded.digest).body) == encoded.body

    def test_created_defaults_to_now(self, store: ObjectStore) -> None:
        encoded = self.samples(store)[0]
        before = time.time()
        store.put(
            encoded.header, [encoded.body], digest=encoded.digest, task=TaskReference("a" * 32)
        )
        assert store.sidecar(encoded.digest).created >= before

    def test_location_is_the_payload_or_none(self, store: ObjectStore) -> None:
        """Where a direct reader finds the payload: for a Zarr array its directory, else a
        file holding the body (Parquet) or the digest's preimage (blob)."""
        for encoded in self.samples(store):
            self.put(store, encoded)
            location = store.location(encoded.digest)
            if location is None:
                continue
            assert location.startswith(("file://", "s3://"))
            fs, path = fsspec.core.url_to_fs(location, **self.location_options(store))
            if fs.isdir(path):
                assert fs.isfile(f"{path.rstrip('/')}/zarr.json")
            else:
                raw = fs.cat_file(path)
                assert raw in (encoded.body, encoded.header.digest_prefix() + encoded.body)
        with pytest.raises(ObjectNotFound):
            store.location("f" * 32)

    # -- objects staged by writers outside the server (docs/design/data-plane.md, Direct writes)

    def staged(self, store: ObjectStore) -> list[tuple[Encoded, Staging]]:
        """Samples this store can stage, each with a fresh staging place (asserting that
        a store without staging says so)."""
        rng = np.random.default_rng(1)
        candidates = [*self.samples(store),
                      # two chunks of the 16 MiB rule, the second an edge
                      encode_array(np.frombuffer(rng.bytes(17 * 2**20), "u1").reshape(17, -1)),
                      encode_array(rng.integers(0, 2, 2**21).astype(bool))]
        found = []
        for encoded in candidates:
            if not store.accepts(encoded.header):
                continue
            try:
                found.append((encoded, store.staging(encoded.header)))
            except StagingUnsupported:
                continue
        assert bool(found) == store.supports_staging
        return found

    def commit(self, store: ObjectStore, staging: Staging, encoded: Encoded, n: int = 1,
               digest: str | None = None, **options: Any) -> PutResult:
        with store.open_staged(staging.id, encoded.header, digest=digest or encoded.digest,
                               task=task(n), **options) as writer:
            return writer.commit()

    def test_staged_objects_are_committed_from_their_files(self, store: ObjectStore) -> None:
        files = self.files(store)
        for encoded, staging in self.staged(store):
            write_staged(staging, staged_files(staging, encoded))
            assert not store.exists(encoded.digest)  # staged is not stored
            result = self.commit(store, staging, encoded)
            assert result.created and result.sidecar.nbytes == len(encoded.body)
            assert bytes(store.get(encoded.digest).body) == encoded.body
            # Staging the same object again only adds the task (the files still proven).
            again = store.staging(encoded.header)
            write_staged(again, staged_files(again, encoded))
            assert not self.commit(store, again, encoded, n=2).created
            assert set(store.sidecar(encoded.digest).tasks) == {task(1).task_hash,
                                                                 task(2).task_hash}
        assert files.leftovers() == []
        if not store.supports_staging:
            with pytest.raises(StagingUnsupported):
                store.open_staged("0" * 32, ObjectHeader.pickle(), digest="0" * 32,
                                  task=task()).commit()

    def test_staged_files_that_do_not_match_are_refused_and_removed(
            self, store: ObjectStore) -> None:
        files = self.files(store)
        for encoded, staging in self.staged(store):
            other = bytearray(encoded.body)
            other[-1] ^= 1  # (a bool array's last byte flips between 0 and 1)
            wrong = Encoded(encoded.header, bytes(other), encoded.digest)
            write_staged(staging, staged_files(staging, wrong))
            with pytest.raises(DigestMismatch):
                self.commit(store, staging, encoded)
            assert not store.exists(encoded.digest) and files.leftovers() == []
            with pytest.raises(StagingNotFound):  # gone, not committable later
                self.commit(store, staging, encoded)
            short = store.staging(encoded.header)
            staged = staged_files(short, encoded)
            last = sorted(staged)[-1]
            staged[last] = staged[last][:-1]
            write_staged(short, staged)
            with pytest.raises((InvalidBody, DigestMismatch)):
                self.commit(store, short, encoded)
            assert not store.exists(encoded.digest) and files.leftovers() == []

    def test_staged_files_must_be_the_layout_alone(self, store: ObjectStore,
                                                   tmp_path: Path) -> None:
        outside = tmp_path / "server-secret"
        for encoded, _ in self.staged(store):
            for damage in ("extra", "symlink", "hardlink", "missing"):
                staging = store.staging(encoded.header)
                staged = staged_files(staging, encoded)
                name = sorted(staged)[0]
                directory = write_staged(staging, staged)
                if damage == "extra":
                    (directory / "zarr.json").write_bytes(b"{}")
                elif damage == "missing":
                    (directory / name).unlink()
                else:
                    outside.write_bytes(staged[name])
                    (directory / name).unlink()
                    link = os.symlink if damage == "symlink" else os.link
                    link(outside, directory / name)
                with pytest.raises(InvalidBody):
                    self.commit(store, staging, encoded)
                assert not store.exists(encoded.digest)
                assert outside.exists() or damage in ("extra", "missing")
                outside.unlink(missing_ok=True)
        assert self.files(store).leftovers() == []

    def test_half_staged_objects_are_invisible_and_swept(self, store: ObjectStore) -> None:
        for encoded, staging in self.staged(store):
            staged = staged_files(staging, encoded)
            write_staged(staging, dict(list(staged.items())[: max(1, len(staged) // 2)]))
            assert not store.exists(encoded.digest)
            assert encoded.digest not in set(store.digests())
        if store.supports_staging:
            files = self.files(store)
            assert files.leftovers()
            assert store.sweep_temporary(older_than=3600) == 0  # maybe still being written
            assert store.sweep_temporary() >= 1
            assert files.leftovers() == []

    def test_staged_objects_are_bounded(self, store: ObjectStore) -> None:
        for encoded, staging in self.staged(store):
            write_staged(staging, staged_files(staging, encoded))
            with pytest.raises(PayloadTooLarge):
                self.commit(store, staging, encoded, max_nbytes=len(encoded.body) - 1)
            assert not store.exists(encoded.digest)
            for bad_id in ("../" + "0" * 29, "f" * 32):  # not an id; never staged
                with pytest.raises(StagingNotFound):
                    self.commit(store, Staging(bad_id, "", staging.layout), encoded)

    def test_body_ranges_are_the_body_as_it_lies(self, store: ObjectStore) -> None:
        """For zero-copy serving: the body's bytes in files, in order (not verified: the
        sizes are checked, a truncated file is corrupt)."""
        rng = np.random.default_rng(2)
        samples = [*self.samples(store),
                   encode_array(np.frombuffer(rng.bytes(17 * 2**20), "u1").reshape(17, -1))]
        served = 0
        for encoded in (s for s in samples if store.accepts(s.header)):
            self.put(store, encoded)
            ranges = store.body_ranges(encoded.digest)
            if ranges is None:
                continue
            served += 1
            body = b""
            for part in ranges:
                with open(part.path, "rb") as f:
                    f.seek(part.offset)
                    body += f.read(part.size)
            assert body == encoded.body
            with open(ranges[-1].path, "r+b") as f:
                f.truncate(ranges[-1].offset + ranges[-1].size - 1)
            with pytest.raises(CorruptObject):
                store.body_ranges(encoded.digest)
        if served:  # a store that serves files says which objects it has not
            with pytest.raises(ObjectNotFound):
                store.body_ranges("f" * 32)
