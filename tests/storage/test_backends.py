"""Every backend passes the one contract."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from storage import (
    BatchItem,
    BlobStore,
    BucketStorage,
    LocalStorage,
    ObjectStore,
    ParquetStore,
    Sidecar,
    ZarrArrayStore,
)
from tests.storage.contract import (
    StoreContract,
    encode_array,
    encode_parquet,
    encode_pickle,
    task,
)

# Fixed-width strings have no stable Zarr v3 spec yet; storage accepts that knowingly.
pytestmark = pytest.mark.filterwarnings(
    "ignore::zarr.core.dtype.common.UnstableSpecificationWarning"
)


class TestBlobStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> ObjectStore:
        return BlobStore(tmp_path / "blob")


class TestZarrArrayStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> ObjectStore:
        return ZarrArrayStore(tmp_path / "zarr")


class TestParquetStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> ObjectStore:
        return ParquetStore(tmp_path / "parquet")


@pytest.mark.slow  # moto's S3 server, a process of its own answering every request
class TestBucketStorage(StoreContract):
    """The same contract on S3 (moto's server on a local port)."""

    @pytest.fixture
    def store(self, s3_url: str) -> ObjectStore:
        # One S3FileSystem for all the tests (fsspec's instance cache; the listings cache
        # stays off): a new one per test costs a botocore session, about 0.5 s each.
        return BucketStorage(s3_url, skip_instance_cache=False)

    def plant_crash_leftovers(self, store: ObjectStore, digest: str) -> list[str]:
        """Blobs whose sidecar never came (a crash between completing the upload and
        writing the sidecar, or in the middle of a delete)."""
        files = self.files(store)
        orphans = [f"{files.root}/{d[:2]}/{d}/blob" for d in ("e" * 32, "f" * 32)]
        for orphan in orphans:
            files.write(orphan, b"pickle\n\n\nhalf")
        return orphans

    def test_a_batch_of_one_value_rewrites_its_sidecar_once(
            self, store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
        # The default put_batch: the later items of a value only add their tasks, all at
        # once (each used to read, extend and put back the growing sidecar).
        encoded = encode_pickle(0)
        written = []
        dumps = Sidecar.dumps
        monkeypatch.setattr(Sidecar, "dumps", lambda self: written.append(1) or dumps(self))
        for first in (1, 41):
            results = store.put_batch([BatchItem(encoded.header, encoded.body, encoded.digest,
                                                 task(n)) for n in range(first, first + 40)])
            assert [r.created for r in results].count(True) == (first == 1)
        assert len(store.sidecar(encoded.digest).tasks) == 80
        # Per batch: its first item's put (a new sidecar, or one task added), then the
        # other 39 tasks in one rewrite (80 writes before).
        assert len(written) == 4, len(written)


class TestLocalStorage(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> ObjectStore:
        return LocalStorage(tmp_path)

    def samples(self, store: ObjectStore) -> list:
        # Also one array big enough to be routed to Zarr.
        large = encode_array(np.arange(2**17, dtype="<f8").reshape(256, 512))
        return [large, *super().samples(store)]


def test_a_batch_of_one_value_writes_its_sidecar_once(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Each task of the value used to rewrite the growing sidecar: quadratic in the tasks
    # (4000 tasks returning 0: 32 s of server CPU).
    storage = LocalStorage(tmp_path)
    encoded = encode_pickle(0)
    written = []
    dumps = Sidecar.dumps
    monkeypatch.setattr(Sidecar, "dumps", lambda self: written.append(1) or dumps(self))
    for first in (1, 301):
        storage.put_batch([BatchItem(encoded.header, encoded.body, encoded.digest, task(n))
                           for n in range(first, first + 300)])
    assert len(storage.sidecar(encoded.digest).tasks) == 600
    # The new object's sidecar, then one with the batch's other tasks; one in the next
    # batch (899 before).
    assert len(written) == 3, len(written)


def test_routing_by_kind_and_size(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    large = encode_array(np.ones((1024, 128), dtype="<f8"))  # exactly 1 MiB
    small = encode_array(np.ones((1024, 127), dtype="<f8"))
    pickled = encode_pickle([1, 2, 3])
    frame = encode_parquet(b"PAR1" + b"\0" * 100 + b"PAR1")
    for n, encoded in enumerate((large, small, pickled, frame)):
        storage.put(encoded.header, encoded.chunks(), digest=encoded.digest, task=task(n))
    assert storage.sidecar(large.digest).storage == "zarr"
    assert storage.sidecar(small.digest).storage == "blob"
    assert storage.sidecar(pickled.digest).storage == "blob"
    assert storage.sidecar(frame.digest).storage == "parquet"
    parquet_dir = tmp_path / "objects" / "parquet" / frame.digest[:2] / frame.digest
    # The file is the body: any Parquet reader opens it where it lies.
    assert (parquet_dir / "data.parquet").read_bytes() == frame.body
    assert (tmp_path / "objects" / "zarr" / large.digest[:2] / large.digest / "zarr.json").is_file()


def test_zarr_objects_open_lazily(tmp_path: Path) -> None:
    store = ZarrArrayStore(tmp_path)
    value = np.arange(6000, dtype="<i8").reshape(60, 100)
    encoded = encode_array(value)
    store.put(encoded.header, encoded.chunks(), digest=encoded.digest, task=task())
    array = store.open_array(encoded.digest)
    np.testing.assert_array_equal(array[10:20, 5], value[10:20, 5])


def test_blob_file_is_the_digest_preimage(tmp_path: Path) -> None:
    import xxhash

    store = BlobStore(tmp_path)
    encoded = encode_array(np.arange(5, dtype="<i2"))
    store.put(encoded.header, [encoded.body], digest=encoded.digest, task=task())
    raw = (store.object_path(encoded.digest) / "blob").read_bytes()
    assert raw == b"ndarray\n<i2\n[5]\n" + encoded.body
    assert xxhash.xxh3_128_hexdigest(raw) == encoded.digest
