"""Parquet backend: a pandas frame as one Parquet file, readable by any Parquet tool.

The client encodes the frame (``client_lib/wire/frames.py``); storage only keeps the bytes: the
object directory holds ``data.parquet``, exactly the body (the digest covers
``parquet\\n\\n\\n`` and then the file), so ``dask.dataframe.read_parquet`` or pyarrow can
open it where it lies (docs/design/storage.md, "Storage").
"""

from __future__ import annotations

from pathlib import Path

from storage._directory import DirectoryStore, FilePayload, Payload, Pieces, file_pieces
from storage.base import Sidecar
from storage.header import ObjectHeader

__all__ = ["PARQUET_NAME", "ParquetStore"]

PARQUET_NAME = "data.parquet"


class ParquetStore(DirectoryStore):
    """Objects of kind ``parquet`` as one ``data.parquet`` file each."""

    name = "parquet"
    payload_name = PARQUET_NAME

    def accepts(self, header: ObjectHeader) -> bool:
        return header.kind == "parquet"

    def _open_payload(self, directory: Path, header: ObjectHeader, *,
                      strong: bool = True) -> Payload:
        return FilePayload(directory / PARQUET_NAME, b"")

    def _read_pieces(self, directory: Path, sidecar: Sidecar) -> Pieces:
        return file_pieces(open(directory / PARQUET_NAME, "rb", buffering=0))  # noqa: SIM115
